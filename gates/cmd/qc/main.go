// Command qc runs every acceptance gate and writes
// artifacts/conformance_report.json: the git commit and the source tree's
// digest, the host's facts, the digests of the launcher, rootfs and kernel
// the gates built and ran (artifacts/gates/built.json, written by the
// gates' TestMain, see gates.Built), and per gate its status, scope and
// the SHA-256 of its log. release_blockers lists what else keeps
// release_ready false: a dirty tree (source_dirty), no record of what ran,
// each limit this host does not enforce.
//
//	qc --strict    every mandatory gate must run and pass; release_ready
//	               is true only then (exit 1 otherwise)
//	qc --handoff   report honestly what ran, failed or could not run here;
//	               never sets release_ready (exit 1 only if a gate failed)
//
// Its hosts section lists every host of the matrix: this machine (its own
// facts and the gates run here) and each guest of hosts.Guests from
// artifacts/hosts.json (written by hosts.TestHostMatrix, which `make test`
// runs before qc). release_ready also requires every guest present, its
// limits enforced and proven, and its steps, tests and gates passed.
//
// It must run as root from the module root (scripts/qc does both).
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/gates"
	"github.com/autonomic-kernel/autonomic/hosts"
	"github.com/autonomic-kernel/autonomic/internal/source"
	"github.com/autonomic-kernel/autonomic/protocol"
)

type gateResult struct {
	Name      string  `json:"name"`
	Proves    string  `json:"proves"`
	Status    string  `json:"status"` // passed, failed, skipped
	Reason    string  `json:"reason,omitempty"`
	Scope     string  `json:"scope,omitempty"`
	Seconds   float64 `json:"seconds"`
	Log       string  `json:"log"`
	LogSHA256 string  `json:"log_sha256"`
}

type hostFacts struct {
	Kernel         string           `json:"kernel"`
	CgroupLayout   string           `json:"cgroup_layout"`
	Limits         []protocol.Limit `json:"limits,omitempty"`
	NotEnforced    []string         `json:"not_enforced,omitempty"`
	LauncherSHA256 string           `json:"launcher_sha256,omitempty"`
	RootfsDigest   string           `json:"rootfs_digest,omitempty"`
	FloorSHA256    string           `json:"floor_sha256,omitempty"`
	Preflight      string           `json:"preflight_verdict,omitempty"`
	PreflightError string           `json:"preflight_error,omitempty"`
	KernelSHA256   string           `json:"kernel_sha256,omitempty"`
	KernelBinary   string           `json:"kernel_binary,omitempty"`
	// ServiceLauncherSHA256 is the installed launcher the scenario ran
	// through sudo, proven there to be this tree's build.
	ServiceLauncherSHA256 string `json:"service_launcher_sha256,omitempty"`
}

type report struct {
	Mode         string       `json:"mode"`
	GeneratedAt  string       `json:"generated_at"`
	SourceSHA256 string       `json:"source_sha256"`
	SourceDirty  bool         `json:"source_dirty"`
	DirtyWhy     string       `json:"source_dirty_why,omitempty"`
	Commit       string       `json:"git_commit"`
	Host         hostFacts    `json:"host"`
	Gates        []gateResult `json:"gates"`
	Hosts        []hosts.Host `json:"hosts"`
	ReleaseReady bool         `json:"release_ready"`
	// Blockers says why release_ready is false beyond the gates and hosts.
	Blockers []string `json:"release_blockers,omitempty"`
}

// testEvent is one line of `go test -json`.
type testEvent struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	strict := flag.Bool("strict", false, "require every mandatory gate to pass")
	handoff := flag.Bool("handoff", false, "report honestly; never release_ready")
	out := flag.String("out", "artifacts", "artifacts directory")
	flag.Parse()
	if *strict == *handoff {
		fmt.Fprintln(os.Stderr, "qc: exactly one of --strict or --handoff")
		os.Exit(2)
	}
	mode := "handoff"
	if *strict {
		mode = "strict"
	}
	logs := filepath.Join(*out, "gates")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "qc:", err)
		os.Exit(2)
	}
	r := newReport(".", mode)
	// A record left by an earlier run must never stand for this one.
	if err := os.Remove(builtPath(logs)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "qc:", err)
		os.Exit(2)
	}
	var others []string
	r.Gates, others = runGates(logs)
	r.Host = host(builtPath(logs))
	allPassed := len(others) == 0
	failed := len(others) > 0
	for _, o := range others {
		fmt.Printf("gates package test failed: %s\n", o)
	}
	for _, g := range r.Gates {
		allPassed = allPassed && g.Status == "passed"
		failed = failed || g.Status == "failed"
	}
	var guestsOK bool
	r.Hosts, guestsOK = matrix(r.Host, r.Gates, filepath.Join(*out, "hosts.json"), r.tree())
	decide(&r, *strict, allPassed, guestsOK)
	b, _ := json.MarshalIndent(r, "", "  ")
	path := filepath.Join(*out, "conformance_report.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "qc:", err)
		os.Exit(2)
	}
	for _, g := range r.Gates {
		fmt.Printf("%-55s %-8s %s\n", g.Name, g.Status, g.Reason)
	}
	// The logs stay in the checkout, which CI discards: what failed and
	// why must reach the run's own output.
	for _, g := range r.Gates {
		if g.Status != "failed" {
			continue
		}
		if b, err := os.ReadFile(g.Log); err == nil {
			for _, l := range failureExcerpt(b, 60) {
				fmt.Printf("%s | %s\n", g.Name, l)
			}
		}
	}
	for _, b := range r.Blockers {
		fmt.Printf("release blocked: %s\n", b)
	}
	for _, h := range r.Hosts {
		var enforced []string
		for _, l := range h.Limits {
			if l.Enforced {
				enforced = append(enforced, l.Name)
			}
		}
		fmt.Printf("host %-12s kernel %-22s cgroup %-8s / %-8s limits enforced [%s] passed=%v\n", h.Name, h.Kernel, h.CgroupLayout,
			h.RootPropagation, strings.Join(enforced, " "), h.Passed)
		if h.MainJob != "" {
			fmt.Printf("host %-12s main job: %s\n", h.Name, h.MainJob)
		}
		for _, p := range h.Problems {
			fmt.Printf("host %-12s %s\n", h.Name, p)
		}
	}
	fmt.Printf("release_ready: %v (%s mode); report: %s\n", r.ReleaseReady, mode, path)
	if (*strict && !r.ReleaseReady) || failed {
		os.Exit(1)
	}
}

// runGates runs every gate test in one `go test -json` and splits the
// output into one log per gate.
func runGates(logs string) ([]gateResult, []string) {
	// Every test of the gates package runs, not only the gate tests: a
	// failure in any of them fails the run (see otherFailures).
	cmd := exec.Command("go", "test", "-count=1", "-json", "-timeout", "60m", "./gates")
	cmd.Env = append(os.Environ(), "AUTONOMIC_REQUIRE_PRIVILEGED=1", gates.BuiltEnv+"="+builtPath(logs))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	runErr := cmd.Run()
	outputs := map[string]*bytes.Buffer{}
	actions := map[string]testEvent{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev testEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		if outputs[top] == nil {
			outputs[top] = &bytes.Buffer{}
		}
		outputs[top].WriteString(ev.Output)
		if (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip") && !strings.Contains(ev.Test, "/") {
			actions[top] = ev
		}
	}
	var others []string
	for name, ev := range actions {
		if !strings.HasPrefix(name, "Test_") && ev.Action == "fail" {
			others = append(others, name)
		}
	}
	sort.Strings(others)
	var res []gateResult
	for _, g := range gates.Table() {
		gr := gateResult{Name: g.Name, Proves: g.Proves, Scope: g.Scope, Log: filepath.Join(logs, g.Name+".log")}
		test := "Test_" + g.Name
		ev, ran := actions[test]
		var log []byte
		if o := outputs[test]; o != nil {
			log = o.Bytes()
		}
		switch {
		case len(g.Tests) == 0:
			gr.Status, gr.Reason = "skipped", "no test proves this gate yet"
		case !ran && runErr != nil:
			gr.Status, gr.Reason = "failed", "the gate run did not complete: "+runErr.Error()
		case !ran:
			gr.Status, gr.Reason = "failed", "the gate test did not run"
		case ev.Action == "pass":
			gr.Status = "passed"
		case ev.Action == "skip":
			gr.Status, gr.Reason = "skipped", lastLine(log)
		default:
			gr.Status, gr.Reason = "failed", "see log"
		}
		gr.Seconds = ev.Elapsed
		if len(log) == 0 {
			log = []byte(gr.Status + ": " + gr.Reason + "\n")
		}
		_ = os.WriteFile(gr.Log, log, 0o644)
		sum := sha256.Sum256(log)
		gr.LogSHA256 = hex.EncodeToString(sum[:])
		res = append(res, gr)
	}
	return res, others
}

// failureExcerpt keeps a failed test log's lines that say why
// (gates.FailureLine), the last max of them.
func failureExcerpt(b []byte, max int) []string {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if gates.FailureLine.MatchString(l) {
			keep = append(keep, strings.TrimRight(l, " \t"))
		}
	}
	if len(keep) > max {
		keep = keep[len(keep)-max:]
	}
	return keep
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// newReport starts the report of the tree at dir: which commit and content
// it speaks for, and whether the work tree is that commit (source.Of: a git
// that cannot answer is a dirty tree).
func newReport(dir, mode string) report {
	t := source.Of(dir)
	return report{Mode: mode, GeneratedAt: time.Now().UTC().Format(time.RFC3339),
		SourceSHA256: t.SHA256, SourceDirty: t.Dirty, DirtyWhy: t.Why, Commit: t.Commit}
}

func (r report) tree() source.Tree {
	return source.Tree{Commit: r.Commit, SHA256: r.SourceSHA256, Dirty: r.SourceDirty, Why: r.DirtyWhy}
}

// decide sets the blockers and release_ready: only a strict run whose
// gates all passed, whose guests all passed on this very tree, and that
// nothing else blocks.
func decide(r *report, strict, allPassed, guestsOK bool) {
	r.Blockers = blockers(*r)
	r.ReleaseReady = strict && allPassed && guestsOK && len(r.Blockers) == 0
}

// host is this machine's facts and what the gates built and ran here:
// the launcher, rootfs and kernel digests and the launcher's preflight
// (limits) come from the record the gates' TestMain wrote (gates.Built),
// never from what is installed.
func host(built string) hostFacts {
	var f hostFacts
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		f.Kernel = strings.TrimSpace(string(b))
	}
	f.CgroupLayout = cgroupLayout()
	x, err := gates.ReadBuilt(built)
	if err != nil {
		f.PreflightError = "no record of what the gates built and ran: " + err.Error()
		return f
	}
	rep := x.Preflight
	f.Limits, f.LauncherSHA256, f.RootfsDigest, f.FloorSHA256, f.Preflight = rep.Limits, x.LauncherSHA256, x.RootfsDigest, rep.FloorSHA256, rep.Verdict
	f.KernelSHA256, f.KernelBinary, f.ServiceLauncherSHA256 = x.KernelSHA256, x.Kernel, x.ServiceLauncherSHA256
	for _, l := range rep.Limits {
		if !l.Enforced {
			f.NotEnforced = append(f.NotEnforced, l.Name+": "+l.Reason)
		}
	}
	return f
}

// builtPath is where the gates record what they built (gates.BuiltEnv).
func builtPath(logs string) string {
	p, err := filepath.Abs(filepath.Join(logs, "built.json"))
	if err != nil {
		return filepath.Join(logs, "built.json")
	}
	return p
}

// blockers are the reasons, other than a gate or a guest, that this run
// cannot be release-ready: a tree that is not a commit, no record of what
// ran, a limit this host does not enforce.
func blockers(r report) []string {
	var out []string
	if r.SourceDirty {
		out = append(out, "source_dirty: "+r.DirtyWhy)
	}
	if r.Commit == "" {
		out = append(out, "no git commit")
	}
	if r.Host.PreflightError != "" {
		out = append(out, r.Host.PreflightError)
	}
	for _, n := range r.Host.NotEnforced {
		out = append(out, "limit not enforced on this host: "+n)
	}
	return out
}

// cgroupLayout tells a pure cgroup v2 host from a hybrid or legacy one by
// what is mounted at /sys/fs/cgroup.
func cgroupLayout() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	v2root, v2unified, v1 := false, false, false
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fields := strings.Fields(pre)
		fstype := strings.Fields(post)[0]
		if len(fields) < 5 {
			continue
		}
		mp := fields[4]
		switch {
		case fstype == "cgroup2" && mp == "/sys/fs/cgroup":
			v2root = true
		case fstype == "cgroup2":
			v2unified = true
		case fstype == "cgroup":
			v1 = true
		}
	}
	switch {
	case v2root && !v1:
		return "unified (cgroup v2)"
	case v2unified && v1:
		return "hybrid (v1 controllers, cgroup v2 without controllers at /sys/fs/cgroup/unified)"
	case v1:
		return "legacy (cgroup v1 only)"
	}
	return "unknown"
}

// matrix is the report's hosts section: this machine, then every guest of
// hosts.Guests as artifacts/hosts.json recorded it (a guest missing there
// is listed as not run). ok is true only when every guest passed.
func matrix(here hostFacts, gs []gateResult, path string, tree source.Tree) ([]hosts.Host, bool) {
	self := hosts.Host{Name: "this-machine", Description: "the machine qc runs on", Kernel: here.Kernel, Passed: true, Tests: map[string]string{}}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		self.CgroupLayout = hosts.CgroupLayout(string(b))
		self.RootPropagation = hosts.RootPropagation(string(b))
	}
	for _, l := range here.Limits {
		self.Limits = append(self.Limits, hosts.Limit{Name: l.Name, Status: "preflight", Enforced: l.Enforced, Figures: map[string]any{"reason": l.Reason}})
	}
	for _, g := range gs {
		self.Gates = append(self.Gates, hosts.Gate{Name: g.Name, Status: g.Status, Scope: "qc's gate run on this machine"})
		self.Passed = self.Passed && g.Status == "passed"
	}
	out := []hosts.Host{self}
	m, err := hosts.Load(path)
	if err == nil && !source.Same(m.Tree, tree) {
		// Results of another tree (an earlier commit, or edits since) say
		// nothing of this one.
		err = fmt.Errorf("%s is of commit %q (source %.12s, dirty %v), this run of %q (source %.12s, dirty %v)",
			path, m.Tree.Commit, m.Tree.SHA256, m.Tree.Dirty, tree.Commit, tree.SHA256, tree.Dirty)
		m = nil
	}
	ok := err == nil
	for _, g := range hosts.Guests {
		var found *hosts.Host
		if m != nil {
			for i := range m.Hosts {
				if m.Hosts[i].Name == g.Name {
					found = &m.Hosts[i]
				}
			}
		}
		if found == nil {
			why := "not in " + path + " (make test-hosts runs the matrix)"
			if err != nil {
				why = err.Error() + " (make test-hosts runs the matrix)"
			}
			out = append(out, hosts.Host{Name: g.Name, Description: g.Description, Problems: []string{"not run: " + why}})
			ok = false
			continue
		}
		failedGate := false
		for _, gt := range found.Gates {
			failedGate = failedGate || gt.Status == "failed"
		}
		ok = ok && found.Passed && !failedGate
		out = append(out, *found)
	}
	return out, ok
}
