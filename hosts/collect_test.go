package hosts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	mountShared = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n" +
		"25 22 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
	mountHybrid = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n" +
		"30 22 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n" +
		"31 22 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
)

// goodGuest writes the results of a guest where everything ran and passed.
func goodGuest(t *testing.T) string {
	dir := t.TempDir()
	res := filepath.Join(dir, "results")
	files := map[string]string{
		"kernel": "6.1.0-57-amd64\n", "pid1": "/usr/lib/systemd/systemd\n", "root_propagation": "shared\n",
		"mountinfo": mountShared, "cgroup_subtree_control": "cpuset cpu io memory pids\n", "debian_version": "12.10\n",
		"domain.log": "=== RUN   TestMemoryLimit\n" +
			`    limits_test.go:200: LIMIT {"limit":"memory_bytes","enforced":true,"value":67108864}` + "\n--- PASS: TestMemoryLimit (1.00s)\n" +
			`    limits_test.go:240: LIMIT {"limit":"pids","enforced":true,"value":32}` + "\n--- PASS: TestPidsLimit (1.00s)\n" +
			`    limits_test.go:280: LIMIT {"limit":"cpu_millis","enforced":true,"value":100}` + "\n--- PASS: TestCPULimit (2.00s)\n" +
			"--- PASS: TestWorkerSeesOnlyItsDomain (0.50s)\nPASS\n",
		"broker_peer.log": "--- PASS: TestEffectBrokerFromInsideADomain (3.00s)\n",
		"scenario.log":    "== The main job\nmain job: landed 0123456789abcdef0123456789abcdef01234567 on refs/heads/agent/codex (episode e, 91 s)\n",
	}
	for _, s := range Steps {
		files[s+".rc"] = "0 10.5 12.0\n"
	}
	for name, content := range files {
		if err := os.MkdirAll(res, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(res, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "console.log"), []byte("AUTONOMIC-GUEST booted uptime=7.25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func write(t *testing.T, dir, name, content string) {
	if err := os.WriteFile(filepath.Join(dir, "results", name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCollectPassesOnlyWhatRan: a guest passes only when everything ran
// and passed; each way it can fall short is a named problem.
func TestCollectPassesOnlyWhatRan(t *testing.T) {
	g := Guests[0]
	h, err := Collect(g, goodGuest(t))
	if err != nil || !h.Passed || len(h.Problems) != 0 {
		t.Fatalf("good guest: %+v %v", h, err)
	}
	if !strings.HasPrefix(h.MainJob, "landed 0123456789abcdef") {
		t.Fatalf("main job %q", h.MainJob)
	}
	if h.BootSeconds != 7.25 || h.CgroupLayout != "unified" || len(h.Limits) != 3 || !h.Limits[0].Enforced {
		t.Fatalf("facts: %+v", h)
	}
	for _, gt := range h.Gates {
		if gt.Name == "linux_namespaces_cgroup_seccomp_overlay" && gt.Status != "passed" ||
			gt.Name == "af_unix_effect_broker" && gt.Status != "passed" ||
			gt.Name == "coding_agent_violation_repair_epoch2" && gt.Status != "passed" ||
			gt.Name == "stale_epoch_race" && gt.Status != "not_run" {
			t.Errorf("gate %+v", gt)
		}
	}
	cases := []struct {
		name, file, content, problem string
	}{
		{"step not run", "scenario.rc", "", "step scenario did not run"},
		{"step failed", "install.rc", "1 3 4", "step install exited 1"},
		{"a skip", "broker_peer.log", "--- SKIP: TestEffectBrokerFromInsideADomain (0.00s)\n", "test TestEffectBrokerFromInsideADomain skipped"},
		{"limit not enforced", "domain.log", `    limits_test.go:200: LIMIT {"limit":"memory_bytes","enforced":false}` +
			"\n--- PASS: TestMemoryLimit (1.00s)\n--- PASS: TestPidsLimit (1s)\n--- PASS: TestCPULimit (1s)\n", "limit memory_bytes not proven enforced"},
		{"limit test failed", "domain.log", "--- FAIL: TestPidsLimit (1.00s)\n", "limit pids not proven enforced (test failed)"},
		{"enforced but failed", "domain.log", `    limits_test.go:240: LIMIT {"limit":"pids","enforced":true}` + "\n--- FAIL: TestPidsLimit (1.00s)\n",
			"limit pids not proven enforced (test failed)"},
		{"limit test missing", "domain.log", "--- PASS: TestWorkerSeesOnlyItsDomain (0.50s)\n", "limit cpu_millis not proven enforced (test not_run)"},
		{"private root", "root_propagation", "private\n", "/ is private"},
		{"not debian's kernel", "kernel", "6.18.0\n", "kernel 6.18.0"},
		{"hybrid cgroups", "mountinfo", mountHybrid, "cgroup layout hybrid"},
		{"not systemd", "pid1", "/bin/busybox\n", "PID 1 is /bin/busybox"},
		{"diagnostic run", "diagnostic", "private-root\n", "diagnostic run (private-root)"},
		{"main job did not land", "scenario.log", "demo: the launcher has no agents rootfs\n", "the main job (autonomic run with the real Codex CLI) landed no commit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := goodGuest(t)
			if c.content == "" {
				_ = os.Remove(filepath.Join(dir, "results", c.file))
			} else {
				write(t, dir, c.file, c.content)
			}
			h, err := Collect(g, dir)
			if err != nil {
				t.Fatal(err)
			}
			if h.Passed || !strings.Contains(strings.Join(h.Problems, "\n"), c.problem) {
				t.Fatalf("passed=%v problems %q, want %q", h.Passed, h.Problems, c.problem)
			}
		})
	}
	h, _ = Collect(g, t.TempDir())
	if h.Passed || len(h.Problems) != 1 || !strings.Contains(h.Problems[0], "no results") {
		t.Fatalf("a guest that wrote nothing: %+v", h)
	}
}

func TestMountinfoFacts(t *testing.T) {
	if got := CgroupLayout(mountShared); got != "unified" {
		t.Errorf("layout %s", got)
	}
	if got := CgroupLayout(mountHybrid); got != "hybrid" {
		t.Errorf("layout %s", got)
	}
	if got := RootPropagation(mountShared); got != "shared" {
		t.Errorf("propagation %s", got)
	}
	if got := RootPropagation(mountHybrid); got != "private" {
		t.Errorf("propagation %s", got)
	}
	if got := RootPropagation("22 1 254:0 / / rw master:3 - ext4 /dev/vda rw\n"); got != "slave" {
		t.Errorf("propagation %s", got)
	}
}
