package gates

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/gates/scenario"
	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
)

// The scenario's kernel runs as production runs it: the autonomic binary
// this tree built (shared.kernel), as the service account, reaching the
// launcher only through the sudoers rule `make install` put in place. The
// launcher behind that rule must be this tree's: the test builds it the way
// install does and compares digests, so a stale install fails the gate
// instead of testing another launcher.

// serviceAccount is the autonomic account's uid and gid.
func serviceAccount(t *testing.T) (int, int) {
	t.Helper()
	u, err := user.Lookup("autonomic")
	if err != nil {
		t.Fatalf("no autonomic service account (make install creates it): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid
}

// installedLauncherIsThisTrees fails unless the launcher the sudoers rule
// names is byte for byte what scripts/build_launcher.sh builds from this
// tree, and the installed rule is the repository's.
func installedLauncherIsThisTrees(t *testing.T, ctx context.Context) string {
	t.Helper()
	mod, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rule, err := os.ReadFile("/etc/sudoers.d/autonomic")
	want, _ := os.ReadFile(filepath.Join(mod, "sudoers.d", "autonomic"))
	if err != nil || !bytes.Equal(rule, want) {
		t.Fatalf("/etc/sudoers.d/autonomic is not the repository's rule (make install): %v", err)
	}
	built := filepath.Join(t.TempDir(), "autonomic-launcher")
	cmd := exec.CommandContext(ctx, filepath.Join(mod, "scripts", "build_launcher.sh"), built)
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build_launcher.sh: %v\n%s", err, out)
	}
	ours, err := fileSHA256(built)
	if err != nil {
		t.Fatal(err)
	}
	installed, err := fileSHA256(domain.DefaultLauncherPath)
	if err != nil || installed != ours {
		t.Fatalf("the launcher behind the sudoers rule (%s, sha256 %s, %v) is not this tree's build (sha256 %s): make install",
			domain.DefaultLauncherPath, installed, err, ours)
	}
	return ours
}

// serviceDomain is the kernel's domain section for the installed launcher,
// through sudo, with its roots from the installed launcher configuration.
func serviceDomain(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("/etc/autonomic/launcher.json")
	if err != nil {
		t.Fatalf("installed launcher configuration (make install): %v", err)
	}
	var lc struct {
		Workspaces   string `json:"workspaces_root"`
		Sockets      string `json:"broker_sockets_root"`
		CgroupParent string `json:"cgroup_parent"`
	}
	if err := json.Unmarshal(b, &lc); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(testbed.CgroupV2Mount(), lc.CgroupParent)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("installed cgroup_parent %s is not under %s: %v", lc.CgroupParent, testbed.CgroupV2Mount(), err)
	}
	return map[string]any{"backend": "linux", "launcher_path": domain.DefaultLauncherPath, "direct": false,
		"workspaces_root": lc.Workspaces, "sockets_root": lc.Sockets, "cgroup_parent": "/" + rel}
}

// installedDomains is the installed launcher run directly (the test is
// root): what the test uses to check that a domain is gone.
func installedDomains() *domain.Linux {
	return &domain.Linux{LauncherPath: domain.DefaultLauncherPath, Direct: true}
}

// startServiceKernel runs `autonomic serve --config` (this tree's build) as
// the service account with env only, its log (JSON, at trace) to logs, and
// returns once its API answers; stop ends it with SIGTERM.
func startServiceKernel(t *testing.T, ctx context.Context, doc []byte, dir string, socket string, env []string, logs io.Writer) (stop func() error) {
	t.Helper()
	uid, gid := serviceAccount(t)
	cfgPath := filepath.Join(dir, "autonomic.json")
	if err := os.WriteFile(cfgPath, doc, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cfgPath, 0, gid); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(shared.kernel, "serve", "--config", cfgPath, "--log-level", "trace")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
		Pdeathsig: syscall.SIGKILL}
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8"}, env...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("serve did not stop on SIGTERM")
		}
	}
	client := api.NewClient(socket)
	for {
		if _, err := client.Kernel(ctx); err == nil {
			return stop
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited before its API answered: %v\n%v", err, logs)
		case <-ctx.Done():
			_ = stop()
			t.Fatalf("serve's API never answered")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// chownTree gives a directory tree to the service account.
func chownTree(t *testing.T, root string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// recordServiceLauncher adds the launcher the scenario runs behind sudo to
// qc's record of what ran (gates.Built), when qc asked for one.
func recordServiceLauncher(t *testing.T, sha string) {
	t.Helper()
	path := os.Getenv(BuiltEnv)
	if path == "" {
		return
	}
	if err := RecordServiceLauncher(path, sha); err != nil {
		t.Fatalf("record of what ran: %v", err)
	}
}

// serviceWorld is what a gate that runs the kernel as production runs it
// sets up first: this tree's launcher behind the sudoers rule (recorded
// for the report), a scratch directory the service account can reach, a
// database of its own, and the reference repository and a state directory
// owned by the account.
type serviceWorld struct {
	launcherSHA string
	uid, gid    int
	tmp         string // removed when the test ends
	db          string
	repo, base  string // the seeded reference repository and its base commit
	state       string
}

// newServiceWorld sets it up; refs are created at the base before the
// repository is handed to the account.
func newServiceWorld(t *testing.T, ctx context.Context, name string, refs ...string) *serviceWorld {
	t.Helper()
	w := &serviceWorld{launcherSHA: installedLauncherIsThisTrees(t, ctx)}
	recordServiceLauncher(t, w.launcherSHA)
	w.uid, w.gid = serviceAccount(t)
	// Not t.TempDir: its parent is 0700, and the service account must
	// reach the repository and its state beneath this.
	tmp, err := os.MkdirTemp("", "autonomic-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	w.tmp = tmp
	w.db = fmt.Sprintf("%s_%d", name, time.Now().UnixNano())
	if err := shared.cluster.CreateDatabase(ctx, w.db); err != nil {
		t.Fatal(err)
	}
	w.repo = filepath.Join(tmp, "calc.git")
	if w.base, err = scenario.Seed(ctx, w.repo); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if _, err := scenario.Git(ctx, w.repo, "update-ref", ref, w.base); err != nil {
			t.Fatal(err)
		}
	}
	// The kernel's account owns the authoritative repository and its state.
	chownTree(t, w.repo, w.uid, w.gid)
	w.state = filepath.Join(tmp, "state")
	if err := os.Mkdir(w.state, 0o750); err != nil {
		t.Fatal(err)
	}
	chownTree(t, w.state, w.uid, w.gid)
	return w
}

// storeConfig is the kernel configuration's store block for the world's
// database.
func (w *serviceWorld) storeConfig() map[string]any {
	return map[string]any{"url": shared.cluster.KernelConnString(w.db), "admin_url": shared.cluster.AdminConnString(w.db)}
}

// serve starts the kernel on doc as the service account. stop ends it and,
// when the test has failed, shows its log (info and above).
func (w *serviceWorld) serve(t *testing.T, ctx context.Context, doc []byte, socket string, env []string) (logs *syncWriter, stop func()) {
	t.Helper()
	logs = &syncWriter{w: &strings.Builder{}}
	halt := startServiceKernel(t, ctx, doc, w.tmp, socket, env, logs)
	return logs, func() {
		_ = halt()
		if t.Failed() {
			t.Logf("kernel log (info and above):\n%s", above(logs.String(), "debug", "trace"))
		}
	}
}
