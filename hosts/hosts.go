package hosts

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/autonomic-kernel/autonomic/gates"
	"github.com/autonomic-kernel/autonomic/internal/source"
)

// Guests are the matrix's guests, each a directory under hosts/.
var Guests = []Guest{
	{Name: "guest-a", Description: "stock Debian 12 (bookworm), systemd as PID 1, Debian's 6.1 kernel, pure cgroup v2, / shared"},
}

// Guest is one host of the matrix booted under QEMU.
type Guest struct {
	Name        string
	Description string
}

// Steps every guest must complete with exit status 0, in order.
var Steps = []string{"provision", "install", "preflight", "domain", "broker_peer", "scenario", "systemd"}

// Limits every guest must enforce (and prove, by its limits tests).
var Limits = []string{"memory_bytes", "pids", "cpu_millis"}

// limitTests maps each limit to the test that proves it.
var limitTests = map[string]string{"memory_bytes": "TestMemoryLimit", "pids": "TestPidsLimit", "cpu_millis": "TestCPULimit"}

// Step is one step of a guest's run.
type Step struct {
	Name    string  `json:"name"`
	Ran     bool    `json:"ran"`
	RC      int     `json:"rc"`
	Seconds float64 `json:"seconds"`
	Tail    string  `json:"tail,omitempty"` // the log's last lines, when it failed
}

// Limit is what a guest's limits test measured.
type Limit struct {
	Name     string         `json:"name"`
	Test     string         `json:"test"`
	Status   string         `json:"status"` // the test's: passed, failed, skipped, not_run
	Enforced bool           `json:"enforced"`
	Figures  map[string]any `json:"figures,omitempty"`
}

// Gate is one acceptance gate's status on a guest.
type Gate struct {
	Name   string `json:"name"`
	Status string `json:"status"` // passed, failed, not_run
	Scope  string `json:"scope"`  // which of its tests ran there
}

// Host is one guest's facts and results.
type Host struct {
	Name              string            `json:"name"`
	Description       string            `json:"description"`
	Kernel            string            `json:"kernel"`
	Debian            string            `json:"debian_version"`
	PID1              string            `json:"pid1"`
	Systemd           string            `json:"systemd"`
	CgroupLayout      string            `json:"cgroup_layout"`
	CgroupControllers []string          `json:"cgroup_controllers"`           // enabled for the root's children, as booted
	InstalledCtrls    []string          `json:"cgroup_controllers_installed"` // and once Autonomic is installed
	RootPropagation   string            `json:"root_propagation"`
	Image             map[string]any    `json:"image"`
	Timing            map[string]string `json:"timing"`
	BootSeconds       float64           `json:"boot_seconds"`
	Steps             []Step            `json:"steps"`
	Tests             map[string]string `json:"tests"` // test name → passed, failed, skipped
	Limits            []Limit           `json:"limits"`
	Gates             []Gate            `json:"gates"`
	MainJob           string            `json:"main_job"` // the scenario's "main job: landed …" line: autonomic run with Codex
	Problems          []string          `json:"problems,omitempty"`
	Passed            bool              `json:"passed"`
}

// Matrix is artifacts/hosts.json.
type Matrix struct {
	GeneratedAt string `json:"generated_at"`
	// Tree is the work tree whose build the guests ran (source.Of at the
	// module root): qc reads the matrix only for that very tree.
	Tree  source.Tree `json:"tree"`
	Hosts []Host      `json:"hosts"`
}

var (
	testLine  = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (Test\S+)`)
	limitLine = regexp.MustCompile(`^\s+\S+\.go:\d+: LIMIT (\{.*\})$`)
	bootLine  = regexp.MustCompile(`AUTONOMIC-GUEST booted uptime=([0-9.]+)`)
	// scripts/demo.sh prints it once the commit of `autonomic run` is on
	// its ref, parented on the base and carrying a committed effect's trailer.
	mainJobLine = regexp.MustCompile(`^main job: landed [0-9a-f]{40} .*$`)
)

// Collect reads one guest's run directory (as scripts/host_matrix.sh left
// it) and judges it.
func Collect(g Guest, dir string) (*Host, error) {
	h := &Host{Name: g.Name, Description: g.Description, Tests: map[string]string{}, Timing: map[string]string{}}
	res := filepath.Join(dir, "results")
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(res, name))
		return strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "image.json")); err == nil {
		_ = json.Unmarshal(b, &h.Image)
		delete(h.Image, "packages") // in the image directory; too long for the report
	}
	if b, err := os.ReadFile(filepath.Join(dir, "matrix.env")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				h.Timing[k] = v
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "console.log")); err == nil {
		if m := bootLine.FindSubmatch(b); m != nil {
			h.BootSeconds, _ = strconv.ParseFloat(string(m[1]), 64)
		}
	}
	if _, err := os.Stat(filepath.Join(res, "kernel")); err != nil {
		h.Problems = append(h.Problems, "the guest wrote no results (did it boot? see console.log)")
		return h, nil
	}
	h.Kernel, h.Debian, h.PID1, h.Systemd = read("kernel"), read("debian_version"), read("pid1"), read("systemd")
	h.RootPropagation = read("root_propagation")
	h.CgroupControllers = strings.Fields(read("cgroup_subtree_control"))
	h.InstalledCtrls = strings.Fields(read("cgroup_subtree_control_installed"))
	h.CgroupLayout = CgroupLayout(read("mountinfo"))

	if d := read("diagnostic"); d != "" {
		h.Problems = append(h.Problems, "diagnostic run ("+d+"): its facts were changed before the steps ran")
	}
	figures := map[string]map[string]any{}
	for _, name := range Steps {
		st := Step{Name: name}
		if f := strings.Fields(read(name + ".rc")); len(f) == 3 {
			st.Ran = true
			st.RC, _ = strconv.Atoi(f[0])
			a, _ := strconv.ParseFloat(f[1], 64)
			b, _ := strconv.ParseFloat(f[2], 64)
			st.Seconds = b - a
		}
		log, _ := os.ReadFile(filepath.Join(res, name+".log"))
		if !st.Ran || st.RC != 0 {
			// Enough for a failed scenario's whole hostile timeline and
			// its checks, and the end of the kernel's log beside it: a
			// flake in CI leaves nothing else behind.
			st.Tail = tail(string(log), 80)
			if name == "scenario" {
				serve, _ := os.ReadFile(filepath.Join(res, "serve.log"))
				st.Tail += "\n--- serve.log, last lines:\n" + tail(string(serve), 40)
			}
		}
		sc := bufio.NewScanner(strings.NewReader(string(log)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := testLine.FindStringSubmatch(sc.Text()); m != nil {
				h.Tests[m[2]] = map[string]string{"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}[m[1]]
			}
			if name == "scenario" && mainJobLine.MatchString(sc.Text()) {
				h.MainJob = strings.TrimPrefix(sc.Text(), "main job: ")
			}
			if m := limitLine.FindStringSubmatch(sc.Text()); m != nil {
				var fig map[string]any
				if json.Unmarshal([]byte(m[1]), &fig) == nil {
					if n, ok := fig["limit"].(string); ok {
						figures[n] = fig
					}
				}
			}
		}
		h.Steps = append(h.Steps, st)
		if !st.Ran {
			h.Problems = append(h.Problems, "step "+name+" did not run")
		} else if st.RC != 0 {
			h.Problems = append(h.Problems, fmt.Sprintf("step %s exited %d", name, st.RC))
		}
	}
	for _, name := range Limits {
		l := Limit{Name: name, Test: limitTests[name], Status: h.Tests[limitTests[name]], Figures: figures[name]}
		if l.Status == "" {
			l.Status = "not_run"
		}
		e, _ := l.Figures["enforced"].(bool)
		l.Enforced = l.Status == "passed" && e
		if !l.Enforced {
			h.Problems = append(h.Problems, fmt.Sprintf("limit %s not proven enforced (test %s)", name, l.Status))
		}
		h.Limits = append(h.Limits, l)
	}
	for name, status := range h.Tests {
		if status != "passed" {
			h.Problems = append(h.Problems, "test "+name+" "+status)
		}
	}
	h.Gates = GateStatus(h.Tests, scenarioStatus(h.Steps))
	if h.MainJob == "" {
		h.Problems = append(h.Problems, "the main job (autonomic run with the real Codex CLI) landed no commit: see the scenario step's log")
	}
	switch {
	case !strings.HasPrefix(h.Kernel, "6.1."):
		h.Problems = append(h.Problems, "kernel "+h.Kernel+" is not Debian 12's 6.1")
	case !strings.HasSuffix(h.PID1, "/systemd"):
		h.Problems = append(h.Problems, "PID 1 is "+h.PID1+", not systemd")
	case h.RootPropagation != "shared":
		h.Problems = append(h.Problems, "/ is "+h.RootPropagation+", not shared as systemd makes it")
	case h.CgroupLayout != "unified":
		h.Problems = append(h.Problems, "cgroup layout "+h.CgroupLayout+", not pure cgroup v2")
	}
	sort.Strings(h.Problems)
	h.Passed = len(h.Problems) == 0
	return h, nil
}

func scenarioStatus(steps []Step) string {
	for _, s := range steps {
		if s.Name == "scenario" {
			switch {
			case !s.Ran:
				return "not_run"
			case s.RC == 0:
				return "passed"
			}
			return "failed"
		}
	}
	return "not_run"
}

// GateStatus is each gate's status on a guest from the tests that ran
// there: passed when every one of its tests that ran passed (the scope
// names them), failed when one did not, not_run when none ran. The
// reference scenario (scripts/demo.sh through `autonomic serve`) stands
// for the coding-agent gate's end-to-end test there.
func GateStatus(tests map[string]string, scenario string) []Gate {
	var out []Gate
	for _, g := range gates.Table() {
		gt := Gate{Name: g.Name, Status: "not_run"}
		var ran []string
		failed := false
		for _, r := range g.Tests {
			for _, name := range r.Tests {
				st, ok := tests[name]
				if name == "TestCodingAgentScenario" && scenario != "not_run" {
					st, ok, name = scenario, true, "scripts/demo.sh (the reference scenario through autonomic serve)"
				}
				if !ok {
					continue
				}
				ran = append(ran, name)
				failed = failed || st != "passed"
			}
		}
		if len(ran) > 0 {
			gt.Status = "passed"
			if failed {
				gt.Status = "failed"
			}
			gt.Scope = "ran there: " + strings.Join(ran, ", ")
		}
		out = append(out, gt)
	}
	return out
}

// CgroupLayout classifies a mountinfo: "unified" (cgroup2 at
// /sys/fs/cgroup, no v1), "hybrid" (v1 controllers, cgroup2 elsewhere),
// "legacy" (v1 only) or "unknown".
func CgroupLayout(mountinfo string) string {
	v2root, v2other, v1 := false, false, false
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, p := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(p) < 1 {
			continue
		}
		switch {
		case p[0] == "cgroup2" && f[4] == "/sys/fs/cgroup":
			v2root = true
		case p[0] == "cgroup2":
			v2other = true
		case p[0] == "cgroup":
			v1 = true
		}
	}
	switch {
	case v2root && !v1:
		return "unified"
	case v1 && v2other:
		return "hybrid"
	case v1:
		return "legacy"
	}
	return "unknown"
}

// RootPropagation reads "/"'s propagation from a mountinfo: "shared",
// "slave" or "private".
func RootPropagation(mountinfo string) string {
	prop := ""
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, _, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 6 || f[4] != "/" {
			continue
		}
		prop = "private"
		for _, opt := range f[6:] {
			switch {
			case strings.HasPrefix(opt, "shared:"):
				prop = "shared"
			case strings.HasPrefix(opt, "master:") && prop != "shared":
				prop = "slave"
			}
		}
	}
	return prop
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Load reads a matrix file (artifacts/hosts.json).
func Load(path string) (*Matrix, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Matrix
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(m.Hosts) == 0 {
		return nil, errors.New(path + ": no hosts")
	}
	return &m, nil
}
