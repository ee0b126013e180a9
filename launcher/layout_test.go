package main

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// layout is the launcher's privilege layout: each internal package and the
// internal packages it may import. Imports go one way, down this table:
// leaves import none; the packages that read or decide import leaves; the
// three that are processes of their own (archiver, notifier, domainroot)
// import those and never each other; only package main, the host-root
// monitor, imports them all.
var layout = map[string][]string{
	"floor": nil, "confine": nil, "wire": nil, "fsat": nil,
	"cgstat": {"fsat"}, "settings": {"fsat"}, "rootfscheck": {"fsat"}, "hostprobe": {"confine"}, "violations": {"fsat", "wire"},
	"archiver":   {"confine", "floor", "fsat", "wire"},
	"notifier":   {"confine", "fsat", "wire"},
	"domainroot": {"confine", "wire"},
}

// hostRootOnly are the calls and process attributes that act as host root
// (new mounts from host objects, id-mapped and attribute-changed mounts,
// another process's limits, a child's cgroup or host credentials): only
// package main may use them.
var hostRootOnly = []string{"Fsopen", "FsconfigCreate", "FsconfigSetString", "Fsmount", "OpenTree", "MountSetattr", "Prlimit", "UseCgroupFD", "CgroupFD", "Credential"}

// domainRootOnly are what the domain's root does inside its own mount and
// user namespaces: only domainroot (and main) may use them.
var domainRootOnly = []string{"Mount", "MoveMount", "PivotRoot", "Unmount", "Sethostname", "UidMappings", "GidMappings"}

// maxHostRootLines bounds the host-root package (issue 27): an auditor
// reads it in one sitting.
const maxHostRootLines = 2000

// TestLauncherPrivilegeLayout: the host-root package (this one) stays
// within maxHostRootLines non-blank lines; every internal package is in
// the layout, imports only what it allows, and uses no call that needs
// more privilege than its process has; docs/LAUNCHER.md's privilege map
// names exactly these packages.
func TestLauncherPrivilegeLayout(t *testing.T) {
	lines := 0
	mainFiles, _ := filepath.Glob("*.go")
	for _, f := range mainFiles {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		lines += nonBlank(t, f)
	}
	t.Logf("host-root package: %d non-blank lines", lines)
	if lines > maxHostRootLines {
		t.Errorf("the host-root package has %d non-blank lines, more than %d: move what needs no host root out", lines, maxHostRootLines)
	}
	dirs, _ := filepath.Glob("internal/*")
	var pkgs []string
	for _, d := range dirs {
		p := filepath.Base(d)
		pkgs = append(pkgs, p)
		allowed, ok := layout[p]
		if !ok {
			t.Errorf("internal/%s is not in the privilege layout", p)
			continue
		}
		files, _ := filepath.Glob(filepath.Join(d, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if strings.HasPrefix(path, "github.com/autonomic-kernel/autonomic/launcher") {
					q, _ := strings.CutPrefix(path, "github.com/autonomic-kernel/autonomic/launcher/internal/")
					if !slices.Contains(allowed, q) {
						t.Errorf("%s imports %s, which its layer may not", f, path)
					}
				}
			}
			ast.Inspect(af, func(n ast.Node) bool {
				var name string
				switch n := n.(type) {
				case *ast.SelectorExpr:
					name = n.Sel.Name
				case *ast.KeyValueExpr:
					if id, ok := n.Key.(*ast.Ident); ok {
						name = id.Name
					}
				}
				if slices.Contains(hostRootOnly, name) {
					t.Errorf("%s uses %s, which only the host-root package may", f, name)
				}
				if p != "domainroot" && slices.Contains(domainRootOnly, name) {
					t.Errorf("%s uses %s, which only domainroot may", f, name)
				}
				return true
			})
		}
	}
	// The map in docs/LAUNCHER.md: one row per package, no more.
	doc, err := os.Open("../docs/LAUNCHER.md")
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Close()
	row := regexp.MustCompile("^\\| `launcher(/internal/([a-z]+))?` \\|")
	var mapped []string
	sawMain := false
	sc := bufio.NewScanner(doc)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			if m[2] == "" {
				sawMain = true
			} else {
				mapped = append(mapped, m[2])
			}
		}
	}
	slices.Sort(mapped)
	slices.Sort(pkgs)
	if !sawMain || !slices.Equal(mapped, pkgs) {
		t.Errorf("docs/LAUNCHER.md's privilege map names launcher=%v and %v; the packages are %v", sawMain, mapped, pkgs)
	}
}

func nonBlank(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}
