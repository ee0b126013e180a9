package hosts

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/internal/source"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
)

// tools the matrix needs on this host (scripts/provision_host.sh installs them).
var tools = []string{"qemu-system-x86_64", "qemu-img", "debootstrap", "mkfs.ext4", "cpio", "modprobe"}

// TestHostMatrix boots each guest of the matrix on the checked-out tree,
// writes artifacts/hosts.json, and requires of each guest: Debian's 6.1
// kernel, systemd as PID 1, pure cgroup v2, "/" shared; every step (install
// as a user does, the containment and limits tests, the broker's peer
// check with a real worker, the reference scenario through serve) exiting
// 0 with no test failed or skipped; and memory, pids and cpu enforced and
// proven.
func TestHostMatrix(t *testing.T) {
	privileged.Require(t)
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			privileged.Skip(t, "host matrix: "+tool+" not found (scripts/provision_host.sh installs QEMU and the image tools)")
		}
	}
	if _, err := os.Stat("/boot"); err != nil {
		privileged.Skip(t, "host matrix: no /boot with Debian's linux-image-amd64")
	}
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Minute)
	}
	// The tree is read before the payload is built from it.
	m := Matrix{GeneratedAt: time.Now().UTC().Format(time.RFC3339), Tree: source.Of(mod)}
	for _, g := range Guests {
		dir := filepath.Join(mod, "artifacts", "hosts", g.Name)
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-30*time.Second))
		cmd := exec.CommandContext(ctx, filepath.Join(mod, "scripts", "host_matrix.sh"), g.Name, dir)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "AUTONOMIC_TESTBED_CONFIG="+testbed.PrebuiltConfigPath)
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("%s: scripts/host_matrix.sh:\n%s", g.Name, out)
		if err != nil {
			t.Errorf("%s: scripts/host_matrix.sh: %v", g.Name, err)
		}
		h, err := Collect(g, dir)
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		m.Hosts = append(m.Hosts, *h)
		t.Logf("%s: kernel %s, %s, cgroup %s (%s), / %s; boot %.1f s; timing %v", g.Name, h.Kernel, h.PID1, h.CgroupLayout,
			strings.Join(h.CgroupControllers, " "), h.RootPropagation, h.BootSeconds, h.Timing)
		for _, s := range h.Steps {
			t.Logf("%s: step %-12s ran=%v rc=%d %.1f s", g.Name, s.Name, s.Ran, s.RC, s.Seconds)
			if s.Tail != "" {
				t.Logf("%s: step %s, end of its log:\n%s", g.Name, s.Name, s.Tail)
			}
		}
		for _, l := range h.Limits {
			fig, _ := json.Marshal(l.Figures)
			t.Logf("%s: limit %-12s enforced=%v (%s) %s", g.Name, l.Name, l.Enforced, l.Status, fig)
		}
		for _, p := range h.Problems {
			t.Errorf("%s: %s", g.Name, p)
		}
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	path := filepath.Join(mod, "artifacts", "hosts.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
