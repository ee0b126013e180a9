package governor

import (
	"slices"
	"testing"

	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/regulator"
)

func TestPatchPaths(t *testing.T) {
	cases := []struct {
		name  string
		diff  string
		paths []string
		ok    bool
	}{
		{"empty", "", nil, true},
		{"modify", "diff --git a/calc.sh b/calc.sh\nindex 1..2 100644\n--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n-x\n+y\n", []string{"calc.sh"}, true},
		{"new", "diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n", []string{"n"}, true},
		{"binary", "diff --git a/bin/x b/bin/x\nnew file mode 100644\nindex 0..1\nGIT binary patch\nliteral 1\nIc${\n\n", []string{"bin/x"}, true},
		{"rename", "diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to .github/w.yml\n", []string{"a", ".github/w.yml"}, true},
		{"quoted", "diff --git \"a/x\\ty\" \"b/x\\ty\"\n--- \"a/x\\ty\"\n+++ \"b/x\\ty\"\n", nil, false},
		{"unprefixed", "--- calc.sh\n+++ calc.sh\n@@ -1 +1 @@\n-x\n+y\n", nil, false},
		{"nameless section", "diff --git a/x b/y z\nold mode 100644\nnew mode 100755\n", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			paths, ok := patchPaths([]byte(c.diff))
			if ok != c.ok || (c.ok && !slices.Equal(paths, c.paths)) {
				t.Fatalf("patchPaths = %q, %v; want %q, %v", paths, ok, c.paths, c.ok)
			}
		})
	}
}

// TestRegimeMaxClass: the broker's table is the lower of the homeostat's
// and the regulator's ceilings, and every name Trajectory can report is in it.
func TestRegimeMaxClass(t *testing.T) {
	m := RegimeMaxClass()
	for r := homeostat.Stable; r <= homeostat.Containment; r++ {
		for l := regulator.Observe; l <= regulator.Act; l++ {
			got, ok := m[regimeName(r, l)]
			if !ok || got != int(min(r.MaxClass(), l.MaxClass())) {
				t.Fatalf("%s: %d, %v", regimeName(r, l), got, ok)
			}
		}
	}
	if m["stable"] != 4 || m["stable@advise"] != 2 || m["uncertain"] != 3 || m["stable@observe"] != 1 {
		t.Fatalf("table %v", m)
	}
}
