package layering

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/autonomic-kernel/autonomic"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

func under(path, dir string) bool {
	return path == module+"/"+dir || strings.HasPrefix(path, module+"/"+dir+"/")
}

func std(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

// construction is the kernel's construction order (issue 12 §5): store →
// regulator → governor → broker → episode controller → API, composed by
// serve. Each part is built from the ones before it, so none imports a
// part built after it (the broker, outside kernel/, imports no kernel
// package at all; see below). A part that needed a later one would have
// to be bound late, as the broker and the controller once were.
var construction = []string{"kernel/regulator", "kernel/governor", "kernel/episode", "kernel/api", "kernel/server"}

// rank is from's place in construction (-1: not in it).
func rank(path string) int {
	for i, dir := range construction {
		if under(path, dir) {
			return i
		}
	}
	return -1
}

// rules: for packages under a directory, which imports are allowed.
func allowed(from, imp string) bool {
	if rf, ri := rank(from), rank(imp); rf >= 0 && ri > rf {
		return false
	}
	switch {
	case under(from, "kernel/regulator"):
		// The regulator reads the broker and the store through the
		// interfaces its health loop names, and nothing of the kernel
		// but authority's classes.
		return !ours(imp) || under(imp, "kernel/regulator") || under(imp, "kernel/authority") || under(imp, "store") ||
			under(imp, "protocol")
	case under(from, "protocol"):
		return !ours(imp)
	case under(from, "launcher"):
		// The launcher is stdlib + x/sys/unix + our protocol (and its own
		// internal packages); nothing else, not even seccomp.
		return std(imp) || imp == "golang.org/x/sys/unix" || under(imp, "protocol") || under(imp, "launcher")
	case under(from, "store"):
		return !ours(imp) || under(imp, "protocol") || under(imp, "store") || under(imp, "internal/privileged")
	case under(from, "broker"):
		return !ours(imp) || under(imp, "protocol") || under(imp, "store") || under(imp, "broker") || under(imp, "internal/privileged")
	case under(from, "seccomp"):
		return !ours(imp) || under(imp, "seccomp") || under(imp, "internal/privileged") || under(imp, "protocol")
	case under(from, "rootfs-builder"):
		// Standalone, but its specs and manifests are read by the one
		// strict-JSON reader, protocol's; its root-only tests skip
		// through internal/privileged, like every other package's.
		return !ours(imp) || under(imp, "rootfs-builder") || under(imp, "protocol") || under(imp, "internal/privileged")
	case under(from, "internal/privileged"):
		return std(imp)
	case under(from, "entry"):
		// Runs inside agent domains and holds no authority: nothing of ours.
		return std(imp) || imp == "golang.org/x/sys/unix" || under(imp, "entry")
	}
	return true
}

func TestDependencyDirection(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			if !allowed(p.ImportPath, imp) {
				t.Errorf("%s imports %s, which ARCHITECTURE.md §1 forbids", p.ImportPath, imp)
			}
		}
		// Nothing but the kernel and test support may depend on the kernel.
		if !under(p.ImportPath, "kernel") && !under(p.ImportPath, "internal/testbed") && !under(p.ImportPath, "gates") {
			for _, imp := range p.Imports {
				if under(imp, "kernel") {
					t.Errorf("%s imports the kernel (%s)", p.ImportPath, imp)
				}
			}
		}
	}
}

// TestLauncherModuleSet pins the launcher's whole transitive dependency set
// outside the standard library: what an auditor has to read besides it.
func TestLauncherModuleSet(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/launcher").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"golang.org/x/sys/unix": true,
	}
	for _, p := range strings.Fields(string(out)) {
		if ours(p) && (under(p, "launcher") || under(p, "protocol")) {
			continue
		}
		if !want[p] {
			t.Errorf("the launcher depends on %s", p)
		}
	}
}

// TestLauncherLinksNoRegexp: every launcher process links the protocol
// package; a regular-expression engine there costs each domain's monitor
// about 0.3 MiB resident (protocol checks its identifiers by hand instead).
func TestLauncherLinksNoRegexp(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/launcher").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "regexp" || p == "regexp/syntax" {
			t.Errorf("the launcher links %s", p)
		}
	}
}

func TestRuleCatchesViolations(t *testing.T) {
	// The rule itself must be able to fail.
	if allowed(module+"/launcher", module+"/seccomp") || allowed(module+"/protocol", module+"/store") ||
		allowed(module+"/launcher", "github.com/jackc/pgx/v5") || allowed(module+"/store", module+"/kernel/domain") ||
		allowed(module+"/entry", module+"/protocol") ||
		allowed(module+"/kernel/governor", module+"/kernel/episode") || allowed(module+"/kernel/regulator", module+"/kernel/governor") ||
		allowed(module+"/kernel/regulator", module+"/broker") || allowed(module+"/kernel/episode", module+"/kernel/server") ||
		allowed(module+"/kernel/api", module+"/kernel/server") || allowed(module+"/broker", module+"/kernel/governor") {
		t.Fatal("the dependency rules admit a forbidden import")
	}
	// And admit the direction construction follows.
	if !allowed(module+"/kernel/episode", module+"/kernel/governor") || !allowed(module+"/kernel/governor", module+"/kernel/regulator") ||
		!allowed(module+"/kernel/server", module+"/kernel/episode") || !allowed(module+"/kernel/governor", module+"/broker") {
		t.Fatal("the dependency rules refuse the construction order")
	}
}

// TestLauncherBinaryHoldsNoWorkerProtocol: the launcher imports protocol,
// which also holds the worker (broker) protocol; none of that half may end
// up in the launcher's binary (a package-level map or table there would be
// linked and initialised in every launcher process).
func TestLauncherBinaryHoldsNoWorkerProtocol(t *testing.T) {
	bin := t.TempDir() + "/launcher"
	build := exec.Command("go", "build", "-o", bin, module+"/launcher")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var protocolSyms int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[2], module+"/protocol.") {
			continue
		}
		protocolSyms++
		for _, worker := range []string{"worker", "approval", "effectresult", "chunk", "classname", "uuid", "kindpattern", "targetid", "keyid", "sha256digest"} {
			if strings.Contains(strings.ToLower(f[2]), worker) {
				t.Errorf("the launcher's binary holds %s", f[2])
			}
		}
	}
	if protocolSyms == 0 {
		t.Fatal("no protocol symbol in the launcher's binary: the check looks at nothing")
	}
}
