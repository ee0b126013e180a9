package agent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestShippedProfiles(t *testing.T) {
	names := Names()
	if !reflect.DeepEqual(names, []string{"claude", "codex", "opencode"}) {
		t.Fatalf("Names() = %v", names)
	}
	want := map[string]struct{ wire, base string }{
		"codex":    {WireResponses, "http://127.0.0.1:8787/v1"},
		"claude":   {WireMessages, "http://127.0.0.1:8787"},
		"opencode": {WireChat, "http://127.0.0.1:8787/v1"},
	}
	for _, n := range names {
		p, err := Load(n)
		if err != nil {
			t.Fatalf("Load(%s): %v", n, err)
		}
		if p.Rootfs != "agents" || p.Seccomp != "agent" || p.WireAPI != want[n].wire || p.BaseURL != want[n].base {
			t.Errorf("%s: rootfs %q seccomp %q wire %q base %q", n, p.Rootfs, p.Seccomp, p.WireAPI, p.BaseURL)
		}
		if p.WallTime() <= 0 {
			t.Errorf("%s: no wall time", n)
		}
	}
	if _, err := Load("nope"); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("Load(nope) = %v, want ErrUnknownAgent", err)
	}
	if _, err := Load("../codex"); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("Load(../codex) = %v, want ErrUnknownAgent", err)
	}
}

// parsed is a rendered argv read back the way autonomic-entry reads it.
type parsed struct {
	home   map[string]string
	env    map[string]string
	bridge []string
	argv   []string
}

func parseRendered(t *testing.T, argv []string) parsed {
	t.Helper()
	if argv[0] != EntryPath {
		t.Fatalf("argv[0] = %q, want %s", argv[0], EntryPath)
	}
	p := parsed{home: map[string]string{}, env: map[string]string{}}
	i := 1
	for ; i < len(argv) && argv[i] != "--"; i += 2 {
		flag, val := argv[i], argv[i+1]
		switch flag {
		case "--home-file":
			rel, b64, _ := strings.Cut(val, "=")
			b, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatalf("--home-file %s: %v", rel, err)
			}
			p.home[rel] = string(b)
		case "--env":
			k, v, _ := strings.Cut(val, "=")
			p.env[k] = v
		case "--bridge":
			p.bridge = append(p.bridge, val)
		default:
			t.Fatalf("unknown autonomic-entry flag %q", flag)
		}
	}
	p.argv = argv[i+1:]
	return p
}

func TestRender(t *testing.T) {
	task := "--help; $(touch /tmp/pwned) `id` fix src/calc.sh"
	for _, n := range Names() {
		p, _ := Load(n)
		argv, err := p.Render(task, "")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		r := parseRendered(t, argv)
		if !reflect.DeepEqual(r.bridge, []string{"127.0.0.1:8787=/run/autonomic/inference.sock"}) {
			t.Errorf("%s: bridges %v", n, r.bridge)
		}
		// The task is one element after "--", verbatim.
		if l := len(r.argv); r.argv[l-1] != task || r.argv[l-2] != "--" || r.argv[0] != p.Argv[0] {
			t.Errorf("%s: agent argv %q", n, r.argv)
		}
		all := strings.Join(argv, "\n")
		for _, v := range r.env {
			all += "\n" + v
		}
		for _, c := range r.home {
			all += "\n" + c
		}
		if strings.Contains(all, "{model}") || strings.Contains(all, "{base_url}") || strings.Count(all, "{task}") != 0 {
			t.Errorf("%s: a placeholder survived rendering", n)
		}
		if _, ok := r.env["HOME"]; ok {
			t.Errorf("%s: sets HOME", n)
		}
	}

	p, _ := Load("codex")
	argv, _ := p.Render("t", "gpt-5.5-mini")
	cfg := parseRendered(t, argv).home[".codex/config.toml"]
	for _, want := range []string{`model = "gpt-5.5-mini"`, `base_url = "http://127.0.0.1:8787/v1"`, `wire_api = "responses"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("codex config.toml lacks %s:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "env_key") {
		t.Error("codex provider names an env_key: Codex would demand a real key")
	}
	p, _ = Load("opencode")
	argv, _ = p.Render("t", "")
	var oc map[string]any
	if err := json.Unmarshal([]byte(parseRendered(t, argv).home[".config/opencode/opencode.json"]), &oc); err != nil {
		t.Fatalf("opencode config is not JSON after rendering: %v", err)
	}
	p, _ = Load("claude")
	argv, _ = p.Render("t", "")
	env := parseRendered(t, argv).env
	if env["ANTHROPIC_BASE_URL"] != "http://127.0.0.1:8787" || env["ANTHROPIC_API_KEY"] != "autonomic-placeholder" || env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" {
		t.Errorf("claude env %v", env)
	}

	for _, bad := range []struct{ task, model string }{{"", ""}, {"  \n", ""}, {"a\x00b", ""}, {"\xff", ""}, {strings.Repeat("x", maxTaskSize+1), ""}, {"t", "a\"b"}, {"t", "x\ny"}} {
		if _, err := p.Render(bad.task, bad.model); !errors.Is(err, ErrTask) {
			t.Errorf("Render(%q, %q) = %v, want ErrTask", bad.task, bad.model, err)
		}
	}
}

func TestDecodeStrict(t *testing.T) {
	good, err := os.ReadFile("profiles/codex.json")
	if err != nil {
		t.Fatal(err)
	}
	var base map[string]any
	if err := json.Unmarshal(good, &base); err != nil {
		t.Fatal(err)
	}
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for kk, vv := range base {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name string
		doc  []byte
		want error
		text string
	}{
		{"unknown field", with("extra", 1), ErrUnknownField, "extra"},
		{"case-folded key", []byte(strings.Replace(string(good), `"name"`, `"Name"`, 1)), ErrUnknownField, "Name"},
		{"kelvin key", []byte(strings.Replace(string(good), `"rootfs"`, "\"root\u212afs\"", 1)), ErrUnknownField, "keys"},
		{"nested unknown", with("home_files", []any{map[string]any{"path": "a", "content": "{base_url}", "mode": 1}}), ErrUnknownField, "mode"},
		{"duplicate key", []byte(strings.Replace(string(good), `"name": "codex",`, `"name": "codex", "name": "claude",`, 1)), ErrDuplicateKey, "name"},
		{"duplicate nested key", with("home_files", []any{map[string]any{"path": "a"}}), nil, ""},
		{"trailing", append(append([]byte{}, good...), []byte(" {}")...), ErrSyntax, "trailing"},
		{"not object", []byte(`[]`), ErrSyntax, "object"},
		{"empty", []byte(``), ErrSyntax, "empty"},
		{"bad utf8", []byte("{\"name\":\"\xff\"}"), ErrSyntax, "UTF-8"},
		{"too deep", with("argv", []any{[]any{[]any{[]any{"x"}}}}), ErrSyntax, "nested"},
		{"wrong type", with("wall_time_seconds", "900"), ErrInvalid, "wall_time_seconds"},
		{"wire api", with("wire_api", "completions"), ErrInvalid, "wire_api"},
		{"rootfs", with("rootfs", "../agents"), ErrInvalid, "rootfs"},
		{"base url elsewhere", with("base_url", "http://10.0.0.1:8787/v1"), ErrInvalid, "base_url"},
		{"base url other port", with("base_url", "http://127.0.0.1:8788/v1"), ErrInvalid, "base_url"},
		{"no task", with("argv", []any{"/usr/local/bin/codex", "exec"}), ErrInvalid, "argv"},
		{"task as flag", with("argv", []any{"/usr/local/bin/codex", "exec", "{task}"}), ErrInvalid, "argv"},
		{"relative argv0", with("argv", []any{"codex", "--", "{task}"}), ErrInvalid, "argv[0]"},
		{"unknown placeholder", with("argv", []any{"/usr/local/bin/codex", "{key}", "--", "{task}"}), ErrInvalid, "placeholder"},
		{"two tasks", with("argv", []any{"/usr/local/bin/codex", "{task}", "--", "{task}"}), ErrInvalid, "placeholder"},
		{"env HOME", with("env", []any{"HOME=/workspace"}), ErrInvalid, "HOME"},
		{"env twice", with("env", []any{"A=1", "A=2"}), ErrInvalid, "twice"},
		{"env own proxy", with("env", []any{"HTTPS_PROXY=http://10.0.0.1:3128"}), ErrInvalid, "egress proxy"},
		{"env own goproxy", with("env", []any{"GOPROXY=direct"}), ErrInvalid, "egress proxy"},
		{"env own npm proxy", with("env", []any{"npm_config_https_proxy=http://10.0.0.1:3128"}), ErrInvalid, "egress proxy"},
		{"env no =", with("env", []any{"A"}), ErrInvalid, "NAME=VALUE"},
		{"own host list injection", with("own_hosts", []any{"chatgpt.com,registry.npmjs.org"}), ErrInvalid, "own_hosts[0]"},
		{"own host wildcard", with("own_hosts", []any{"*"}), ErrInvalid, "own_hosts[0]"},
		{"own host address", with("own_hosts", []any{"10.0.0.1"}), ErrInvalid, "own_hosts[0]"},
		{"own host upper case", with("own_hosts", []any{"ChatGPT.com"}), ErrInvalid, "own_hosts[0]"},
		{"own host wrong type", with("own_hosts", "chatgpt.com"), ErrInvalid, "own_hosts"},
		{"home escape", with("home_files", []any{map[string]any{"path": "../etc/x", "content": "{base_url}"}}), ErrInvalid, "home_files[0].path"},
		{"home absolute", with("home_files", []any{map[string]any{"path": "/etc/x", "content": "{base_url}"}}), ErrInvalid, "home_files[0].path"},
		{"home equals", with("home_files", []any{map[string]any{"path": "a=b", "content": "{base_url}"}}), ErrInvalid, "home_files[0].path"},
		{"home twice", with("home_files", []any{map[string]any{"path": "a", "content": "{base_url}"}, map[string]any{"path": "a", "content": ""}}), ErrInvalid, "twice"},
		{"base url unused", with("home_files", []any{}), ErrInvalid, "base_url"},
		{"wall time zero", with("wall_time_seconds", 0), ErrInvalid, "wall_time_seconds"},
		{"wall time huge", with("wall_time_seconds", 1e9), ErrInvalid, "wall_time_seconds"},
		{"missing seccomp", with("seccomp", nil), ErrInvalid, "seccomp"},
		{"model with quote", with("model", `gpt"5`), ErrInvalid, "model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.doc)
			if tc.want == nil {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			var fe *FieldError
			if !errors.Is(err, tc.want) || !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Decode = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	if _, err := Decode(good); err != nil {
		t.Fatalf("shipped codex profile: %v", err)
	}
}

// FuzzDecode: never panics; whatever it accepts is valid, renders, and
// renders with the task as the last element after "--".
func FuzzDecode(f *testing.F) {
	for _, n := range Names() {
		b, _ := os.ReadFile(filepath.Join("profiles", n+".json"))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted profile fails Validate: %v", err)
		}
		argv, err := p.Render("the task", "")
		if err != nil {
			t.Fatalf("accepted profile does not render: %v", err)
		}
		if argv[0] != EntryPath || argv[len(argv)-1] != "the task" || argv[len(argv)-2] != "--" {
			t.Fatalf("rendered %q", argv)
		}
	})
}

// TestRenderWithEgress: only WithEgress bridges the egress socket and adds
// the proxy variables; every variable of EgressEnv reaches the agent, the
// model's base URL stays off the proxy (NO_PROXY covers the inference
// bridge's host), so do the profile's own_hosts, and the registries are named in plain HTTP so the proxy
// sees and may cache what is fetched.
func TestRenderWithEgress(t *testing.T) {
	for _, n := range Names() {
		p, _ := Load(n)
		plain, _ := p.Render("t", "")
		argv, err := p.Render("t", "", WithEgress())
		if err != nil {
			t.Fatal(err)
		}
		without, with := parseRendered(t, plain), parseRendered(t, argv)
		if !reflect.DeepEqual(without.bridge, []string{BridgeAddr + "=" + InferenceSocket}) {
			t.Errorf("%s without egress bridges %v", n, without.bridge)
		}
		if !reflect.DeepEqual(with.bridge, []string{BridgeAddr + "=" + InferenceSocket, "127.0.0.1:8788=/run/autonomic/egress.sock"}) {
			t.Errorf("%s with egress bridges %v", n, with.bridge)
		}
		for _, kv := range EgressEnv() {
			k, v, _ := strings.Cut(kv, "=")
			if (k == "NO_PROXY" || k == "no_proxy") && len(p.OwnHosts) > 0 {
				// The agent's own hosts stay off the proxy (own_hosts).
				v += "," + strings.Join(p.OwnHosts, ",")
			}
			if with.env[k] != v {
				t.Errorf("%s: %s=%q, want %q", n, k, with.env[k], v)
			}
			if _, ok := without.env[k]; ok {
				t.Errorf("%s without egress sets %s", n, k)
			}
		}
		if !reflect.DeepEqual(with.argv, without.argv) || !reflect.DeepEqual(with.home, without.home) {
			t.Errorf("%s: egress changed the agent's argv or home files", n)
		}
		if len(with.env) != len(without.env)+len(EgressEnv()) {
			t.Errorf("%s: %d variables with egress, %d without, EgressEnv has %d", n, len(with.env), len(without.env), len(EgressEnv()))
		}
		if !strings.Contains(with.env["NO_PROXY"], strings.Split(BridgeAddr, ":")[0]) {
			t.Errorf("%s: the inference bridge would go through the proxy (NO_PROXY=%q)", n, with.env["NO_PROXY"])
		}
	}
	env := map[string]string{}
	for _, kv := range EgressEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, want := range map[string]string{"HTTP_PROXY": "http://127.0.0.1:8788", "HTTPS_PROXY": "http://127.0.0.1:8788",
		"GOPROXY": "https://proxy.golang.org", "npm_config_registry": "https://registry.npmjs.org/", "PIP_INDEX_URL": "https://pypi.org/simple/"} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
}
