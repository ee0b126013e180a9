package domain_test

import (
	"os"
	"strings"
	"testing"
)

// domainNamespaces is every namespace the launcher gives a domain its own
// of (protocol/README.md, preflight "namespaces").
var domainNamespaces = []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}

// TestWorkerNamespacesAreItsOwn: a worker's every namespace differs from
// the host's (this test's, which runs the launcher). The worker reads its own
// /proc/self/ns links; nsfs inode numbers are unique host-wide, so equal
// links mean a shared namespace.
func TestWorkerNamespacesAreItsOwn(t *testing.T) {
	d, ctx := setup(t)
	ws, _ := workspace(t, nil)
	script := "for n in " + strings.Join(domainNamespaces, " ") + "; do echo \"NS $n $(readlink /proc/self/ns/$n)\"; done"
	out, ex := run(t, d, ctx, ws, script)
	if ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Fatalf("worker failed: %+v\n%s", ex, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "NS" {
			got[f[1]] = f[2]
		}
	}
	for _, n := range domainNamespaces {
		w := got[n]
		if !strings.HasPrefix(w, n+":[") {
			t.Errorf("worker's %s namespace unreadable: %q\n%s", n, w, out)
			continue
		}
		h, err := os.Readlink("/proc/self/ns/" + n)
		if err != nil {
			t.Fatal(err)
		}
		if h == w {
			t.Errorf("worker shares the host's %s namespace: %s", n, w)
		}
	}
	t.Logf("worker namespaces: %v", got)
}
