package agent

import (
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Names fixed by the issue 13 contract (CONTRACT13.md).
const (
	// EntryPath is the static in-domain helper the agents rootfs carries.
	EntryPath = "/usr/local/bin/autonomic-entry"
	// BridgeAddr is the loopback listener inside the domain that
	// autonomic-entry forwards to InferenceSocket.
	BridgeAddr = "127.0.0.1:8787"
	// InferenceSocket is the episode's relay socket inside the domain.
	InferenceSocket = "/run/autonomic/inference.sock"
)

// Wire APIs a profile may name (the relay's routes).
const (
	WireResponses = "responses" // POST /v1/responses
	WireMessages  = "messages"  // POST /v1/messages
	WireChat      = "chat"      // POST /v1/chat/completions
)

// Limits.
const (
	maxProfileSize  = 256 << 10
	maxHomeFileSize = 64 << 10
	maxTaskSize     = 64 << 10
	maxWallTime     = 24 * 60 * 60
)

// Profile is one agent CLI, as profiles/<name>.json declares it.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Rootfs names the launcher's rootfs the agent runs in ("agents").
	Rootfs string `json:"rootfs"`
	// WireAPI is the inference API the agent speaks.
	WireAPI string `json:"wire_api"`
	// Model is the model the agent asks for unless the caller overrides it
	// (the relay's policy decides whether it is allowed).
	Model string `json:"model"`
	// BaseURL is what the agent is told its provider lives at: the bridge,
	// "http://127.0.0.1:8787" or "http://127.0.0.1:8787/v1".
	BaseURL string `json:"base_url"`
	// Argv is the agent's command: argv[0] an absolute path in the rootfs,
	// "--" then "{task}" as the last two elements. {model} may appear in
	// any element.
	Argv []string `json:"argv"`
	// Env is "NAME=VALUE" pairs added to the agent's environment; values
	// may hold {model} and {base_url}.
	Env []string `json:"env"`
	// HomeFiles are written under the worker's HOME before the agent
	// starts; content may hold {model} and {base_url}.
	HomeFiles []HomeFile `json:"home_files"`
	// Seccomp is the launcher seccomp profile the domain uses ("agent").
	Seccomp string `json:"seccomp"`
	// OwnHosts are the hosts the agent CLI itself calls besides its model
	// (telemetry, update and account endpoints). With egress they go into
	// NO_PROXY: such a call then fails inside the domain as it does
	// without egress (there is no network), instead of reaching the proxy
	// as a refusal — a refusal is a signal, and the CLI's own background
	// calls would climb the homeostat without anything being wrong. It
	// grants nothing: what a process sends to the proxy is admitted or
	// refused, and counted, whatever NO_PROXY says.
	OwnHosts []string `json:"own_hosts,omitempty"`
	// WallTimeSeconds bounds the episode: agents retry a missing model
	// forever, so every run needs an end.
	WallTimeSeconds int `json:"wall_time_seconds"`
}

// HomeFile is one file written under HOME (mode 0600).
type HomeFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// WallTime is the profile's default wall-time bound.
func (p *Profile) WallTime() time.Duration {
	return time.Duration(p.WallTimeSeconds) * time.Second
}

var (
	nameRE    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	modelRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	// hostRE is a DNS name of two or more labels (own_hosts).
	hostRE        = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)
	placeholderRE = regexp.MustCompile(`\{[a-z_]+\}`)
	homeSegRE     = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

func invalid(field, format string, a ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, a...), Err: ErrInvalid}
}

// checkPlaceholders allows only the named placeholders in s.
func checkPlaceholders(field, s string, allowed ...string) error {
	for _, m := range placeholderRE.FindAllString(s, -1) {
		ok := false
		for _, a := range allowed {
			ok = ok || m == a
		}
		if !ok {
			return invalid(field, "placeholder %s is not allowed here", m)
		}
	}
	return nil
}

func checkText(field, s string, max int) error {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return invalid(field, "not valid UTF-8 text")
	}
	if len(s) > max {
		return invalid(field, "longer than %d bytes", max)
	}
	return nil
}

// Validate checks a whole profile; Decode runs it on every document.
func (p *Profile) Validate() error {
	if !nameRE.MatchString(p.Name) {
		return invalid("name", "%q is not a lower-case name", p.Name)
	}
	if err := checkText("description", p.Description, 4096); err != nil {
		return err
	}
	if !nameRE.MatchString(p.Rootfs) {
		return invalid("rootfs", "%q is not a rootfs name", p.Rootfs)
	}
	switch p.WireAPI {
	case WireResponses, WireMessages, WireChat:
	default:
		return invalid("wire_api", "%q is not responses, messages or chat", p.WireAPI)
	}
	if !modelRE.MatchString(p.Model) {
		return invalid("model", "%q is not a model name", p.Model)
	}
	if p.BaseURL != "http://"+BridgeAddr && p.BaseURL != "http://"+BridgeAddr+"/v1" {
		return invalid("base_url", "%q is not the inference bridge (http://%s or http://%s/v1)", p.BaseURL, BridgeAddr, BridgeAddr)
	}
	n := len(p.Argv)
	if n < 3 || p.Argv[n-2] != "--" || p.Argv[n-1] != "{task}" {
		return invalid("argv", `must end with "--", "{task}" (the task is never read as a flag)`)
	}
	if !path.IsAbs(p.Argv[0]) || path.Clean(p.Argv[0]) != p.Argv[0] {
		return invalid("argv[0]", "%q is not an absolute clean path", p.Argv[0])
	}
	for i, a := range p.Argv[:n-1] {
		f := fmt.Sprintf("argv[%d]", i)
		if err := checkText(f, a, 4096); err != nil {
			return err
		}
		if err := checkPlaceholders(f, a, "{model}"); err != nil {
			return err
		}
	}
	usesBase := false
	names := map[string]bool{}
	for i, kv := range p.Env {
		f := fmt.Sprintf("env[%d]", i)
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envNameRE.MatchString(k) {
			return invalid(f, "want NAME=VALUE")
		}
		if k == "HOME" {
			return invalid(f, "HOME is the launcher's (/tmp/home)")
		}
		if reservedEnv(k) {
			return invalid(f, "%s is the egress proxy's (WithEgress)", k)
		}
		if names[k] {
			return invalid(f, "%s set twice", k)
		}
		names[k] = true
		if err := checkText(f, v, 4096); err != nil {
			return err
		}
		if err := checkPlaceholders(f, v, "{model}", "{base_url}"); err != nil {
			return err
		}
		usesBase = usesBase || strings.Contains(v, "{base_url}")
	}
	paths := map[string]bool{}
	for i, h := range p.HomeFiles {
		f := fmt.Sprintf("home_files[%d]", i)
		if err := checkHomePath(h.Path); err != nil {
			return invalid(f+".path", "%v", err)
		}
		if paths[h.Path] {
			return invalid(f+".path", "%s given twice", h.Path)
		}
		paths[h.Path] = true
		if err := checkText(f+".content", h.Content, maxHomeFileSize); err != nil {
			return err
		}
		if err := checkPlaceholders(f+".content", h.Content, "{model}", "{base_url}"); err != nil {
			return err
		}
		usesBase = usesBase || strings.Contains(h.Content, "{base_url}")
	}
	if !usesBase {
		return invalid("base_url", "neither env nor home_files use {base_url}: the agent would not find the bridge")
	}
	if !nameRE.MatchString(p.Seccomp) {
		return invalid("seccomp", "%q is not a profile name", p.Seccomp)
	}
	if len(p.OwnHosts) > 64 {
		return invalid("own_hosts", "more than 64 hosts")
	}
	for i, h := range p.OwnHosts {
		if !hostRE.MatchString(h) || len(h) > 253 {
			return invalid(fmt.Sprintf("own_hosts[%d]", i), "%q is not a lower-case DNS name", h)
		}
	}
	if p.WallTimeSeconds < 1 || p.WallTimeSeconds > maxWallTime {
		return invalid("wall_time_seconds", "%d is not in 1..%d", p.WallTimeSeconds, maxWallTime)
	}
	return nil
}

// checkHomePath accepts a relative path of plain segments: no "..", no
// empty or dot segments, no "=" (autonomic-entry's REL=BASE64 separator).
func checkHomePath(p string) error {
	if p == "" || len(p) > 256 {
		return errors.New("empty or too long")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." || !homeSegRE.MatchString(seg) {
			return fmt.Errorf("%q is not a relative path of plain names", p)
		}
	}
	return nil
}

// Render returns the worker's argv for task: autonomic-entry writing the
// home files, setting the environment and bridging the inference socket,
// then the agent's argv with the task as its last element. model overrides
// the profile's model when non-empty. WithEgress adds the egress bridge and
// EgressEnv.
func (p *Profile) Render(task, model string, opts ...RenderOption) ([]string, error) {
	var o renderOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(task) == "" {
		return nil, &FieldError{Field: "task", Reason: "empty", Err: ErrTask}
	}
	if err := checkText("task", task, maxTaskSize); err != nil {
		return nil, &FieldError{Field: "task", Reason: err.(*FieldError).Reason, Err: ErrTask}
	}
	if model == "" {
		model = p.Model
	}
	if !modelRE.MatchString(model) {
		return nil, &FieldError{Field: "model", Reason: fmt.Sprintf("%q is not a model name", model), Err: ErrTask}
	}
	fill := func(s string) string {
		return strings.NewReplacer("{model}", model, "{base_url}", p.BaseURL).Replace(s)
	}
	argv := []string{EntryPath}
	for _, h := range p.HomeFiles {
		argv = append(argv, "--home-file", h.Path+"="+base64.StdEncoding.EncodeToString([]byte(fill(h.Content))))
	}
	for _, kv := range p.Env {
		argv = append(argv, "--env", fill(kv))
	}
	argv = append(argv, "--bridge", BridgeAddr+"="+InferenceSocket)
	if o.egress {
		for _, kv := range EgressEnv() {
			if k, v, _ := strings.Cut(kv, "="); (k == "NO_PROXY" || k == "no_proxy") && len(p.OwnHosts) > 0 {
				kv = k + "=" + v + "," + strings.Join(p.OwnHosts, ",")
			}
			argv = append(argv, "--env", kv)
		}
		argv = append(argv, "--bridge", EgressBridgeAddr+"="+EgressSocket)
	}
	argv = append(argv, "--")
	n := len(p.Argv)
	for _, a := range p.Argv[:n-1] {
		argv = append(argv, fill(a))
	}
	return append(argv, task), nil
}

//go:embed profiles/*.json
var shipped embed.FS

// Names lists the shipped profiles, sorted.
func Names() []string {
	ents, _ := fs.ReadDir(shipped, "profiles")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Load returns the shipped profile called name.
func Load(name string) (*Profile, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownAgent, name)
	}
	data, err := shipped.ReadFile("profiles/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("%w: %q (have %s)", ErrUnknownAgent, name, strings.Join(Names(), ", "))
	}
	p, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("profiles/%s.json: %w", name, err)
	}
	if p.Name != name {
		return nil, fmt.Errorf("profiles/%s.json: %w", name, invalid("name", "%q differs from the file name", p.Name))
	}
	return p, nil
}
