package gates

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// citedTest is a test name in SECURITY.md's "tested by" column: `TestX`,
// or `TestX…` for every test whose name starts so.
var citedTest = regexp.MustCompile("`(Test[A-Za-z0-9_]+)(…)?`")

// reportedOutsideGates are cited tests the report carries in another
// section: the host matrix boots guests (make test-hosts) and its results
// are the report's hosts section, which release_ready requires.
var reportedOutsideGates = map[string]bool{"TestHostMatrix": true}

// TestSecurityTestsBelongToGates: every test SECURITY.md cites as holding a
// boundary runs in a gate, so the conformance report covers every claim;
// and each exists in the tree (a renamed test would otherwise leave the
// claim untested in silence).
func TestSecurityTestsBelongToGates(t *testing.T) {
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(mod, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	inGate := map[string]string{}
	for _, g := range Table() {
		for _, r := range g.Tests {
			for _, tn := range r.Tests {
				inGate[tn] = g.Name
			}
		}
	}
	defined := testFuncs(t, mod)
	column := -1
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			column = -1
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if column < 0 {
			for i, c := range cells {
				if strings.TrimSpace(c) == "tested by" {
					column = i
				}
			}
			continue
		}
		if column >= len(cells) {
			t.Errorf("SECURITY.md row without a tested-by cell: %s", line)
			continue
		}
		for _, m := range citedTest.FindAllStringSubmatch(cells[column], -1) {
			name, prefix := m[1], m[2] != ""
			n++
			var matches []string
			for tn := range defined {
				if tn == name || prefix && strings.HasPrefix(tn, name) {
					matches = append(matches, tn)
				}
			}
			if len(matches) == 0 {
				t.Errorf("SECURITY.md cites %s, which no test file defines", m[0])
			}
			for _, tn := range matches {
				if _, ok := inGate[tn]; !ok && !reportedOutsideGates[tn] {
					t.Errorf("SECURITY.md cites %s (%s), which belongs to no gate", tn, defined[tn])
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("read only %d cited tests from SECURITY.md's tested-by column: the table's shape changed", n)
	}
}

// TestGateTestsExist: every test a gate names is defined in its package
// (runGate would fail it too, but only after minutes of privileged runs).
func TestGateTestsExist(t *testing.T) {
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	defined := testFuncs(t, mod)
	for _, g := range Table() {
		for _, r := range g.Tests {
			for _, tn := range r.Tests {
				file, ok := defined[tn]
				if !ok || filepath.Dir(file) != filepath.Clean(r.Package) {
					t.Errorf("gate %s: %s is not a test of %s (found in %q)", g.Name, tn, r.Package, file)
				}
			}
		}
	}
}

// TestGateScopes: every gate says how far its tests reach.
func TestGateScopes(t *testing.T) {
	for _, g := range Table() {
		if strings.TrimSpace(g.Scope) == "" {
			t.Errorf("gate %s has no scope", g.Name)
		}
	}
}

// testFuncs maps every top-level Test function in the module's _test.go
// files to its file.
func testFuncs(t *testing.T, mod string) map[string]string {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)
	out := map[string]string{}
	err := filepath.WalkDir(mod, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mod, p)
		for _, m := range decl.FindAllSubmatch(b, -1) {
			out[string(m[1])] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
