package testbed

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/domain"
	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

// CgroupV2Mount is where this host family mounts the unified hierarchy:
// /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one.
func CgroupV2Mount() string {
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			pre, post, ok := strings.Cut(line, " - ")
			if !ok || !strings.HasPrefix(post, "cgroup2 ") {
				continue
			}
			if f := strings.Fields(pre); len(f) > 4 {
				return f[4]
			}
		}
	}
	return ""
}

// ProbePath is where the probe sits inside every testbed rootfs.
const ProbePath = "/usr/local/bin/autonomic-probe"

// Bed is one installed launcher.
type Bed struct {
	Dir          string // everything lives here
	Launcher     string // the launcher binary
	ConfigPath   string
	Rootfs       string
	RootfsDigest string
	Workspaces   string
	Sockets      string
	State        string
	CgroupParent string
	OwnerUID     int
	OwnerGID     int
	UIDBase      uint32

	mod, specPath string
	add           []rootfs.Add
	cfg           map[string]any
	poolLock      *os.File // holds the bed's uid slice (claimSlice)
}

// Beds draw 16-range uid slices from 0x70000000 up to WideUIDPool's region,
// skipping the first eight: install.sh's pool (0x70000000, 128 ranges).
// A bed holds an exclusive flock on its slice's file in poolLocks for its
// life, and the kernel drops it when the process exits, so two test
// processes never draw one slice: a random draw alone collided (a package's
// domain tests found another package's live agent domain in their pool).
const (
	poolLocks             = "/run/autonomic-testbed/pools"
	firstSlice, lastSlice = 8, 1024
)

func claimSlice() (uint32, *os.File, error) {
	if err := os.MkdirAll(poolLocks, 0o700); err != nil {
		return 0, nil, err
	}
	var rnd [2]byte
	_, _ = rand.Read(rnd[:])
	const n = lastSlice - firstSlice
	start := uint32(binary.BigEndian.Uint16(rnd[:])) % n
	for i := uint32(0); i < n; i++ {
		k := firstSlice + (start+i)%n
		f, err := os.OpenFile(filepath.Join(poolLocks, fmt.Sprintf("%d.lock", k)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return 0, nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return 0x70000000 + k*16*65536, f, nil
		}
		_ = f.Close()
	}
	return 0, nil, fmt.Errorf("every uid slice of %s is held by another test bed", poolLocks)
}

// Options select the rootfs spec and extra files.
type Options struct {
	Spec string // path relative to the module root; default rootfs-builder/specs/minimal.json
	Add  []rootfs.Add
	// EffectClient builds the static autonomic-effect client into the
	// rootfs at EffectClientPath, for tests that reach the broker.
	EffectClient bool
}

// EffectClientPath is where Options.EffectClient puts the client.
const EffectClientPath = "/usr/local/bin/autonomic-effect"

// ModuleRootEnv names the repository root for test binaries run where no
// Go toolchain is (the host matrix's guests run prebuilt test binaries).
const ModuleRootEnv = "AUTONOMIC_MODULE_ROOT"

// PrebuiltEnv names a directory of prebuilt static binaries (PrebuiltLauncher,
// the probe and the effect client, named as their paths' bases) that New
// installs instead of building them with the Go toolchain. The launcher
// there must be built with -X main.configPath=PrebuiltConfigPath.
const PrebuiltEnv = "AUTONOMIC_TESTBED_PREBUILT"

// PrebuiltConfigPath is the configuration path baked into a prebuilt
// testbed launcher; one prebuilt bed exists at a time.
const PrebuiltConfigPath = "/run/autonomic-testbed/launcher.json"

// ModuleRoot finds the repository root: $AUTONOMIC_MODULE_ROOT, else from
// the current directory through the Go toolchain.
func ModuleRoot() (string, error) {
	if dir := os.Getenv(ModuleRootEnv); dir != "" {
		return dir, nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// New builds and installs a launcher. The caller must be root.
func New(ctx context.Context, opts Options) (*Bed, error) {
	mod, err := ModuleRoot()
	if err != nil {
		return nil, fmt.Errorf("module root: %w", err)
	}
	dir, err := os.MkdirTemp("", "autonomic-testbed-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	b := &Bed{
		Dir: dir, Launcher: filepath.Join(dir, "bin", "autonomic-launcher"), ConfigPath: filepath.Join(dir, "etc", "launcher.json"),
		Rootfs: filepath.Join(dir, "rootfs"), Workspaces: filepath.Join(dir, "workspaces"), Sockets: filepath.Join(dir, "sockets"),
		State: filepath.Join(dir, "state"),
	}
	for _, d := range []string{"bin", "etc", "workspaces", "sockets"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(b.State, 0o700); err != nil {
		return nil, err
	}
	prebuilt := os.Getenv(PrebuiltEnv)
	b.mod = mod
	build := func(pkg, out string, flags ...string) error { return b.build(ctx, pkg, out, flags...) }
	if prebuilt != "" {
		// The launcher's configuration path is fixed at build time.
		b.ConfigPath = PrebuiltConfigPath
		if err := os.MkdirAll(filepath.Dir(b.ConfigPath), 0o755); err != nil {
			return nil, err
		}
		if _, err := os.Lstat(b.ConfigPath); err == nil {
			return nil, fmt.Errorf("%s exists: another prebuilt testbed is live", b.ConfigPath)
		}
	}
	if err := build("./launcher", b.Launcher, "-ldflags", "-s -w -X main.configPath="+b.ConfigPath); err != nil {
		return nil, err
	}
	// The probe makes raw syscalls inside domains; tests assert on them.
	statics := map[string]string{"./internal/testbed/probe": ProbePath}
	if opts.EffectClient {
		statics["./broker/cmd/autonomic-effect"] = EffectClientPath
	}
	add := opts.Add
	for pkg, dest := range statics {
		out := filepath.Join(dir, "bin", filepath.Base(dest))
		if err := build(pkg, out); err != nil {
			return nil, err
		}
		add = append(add, rootfs.Add{Src: out, Dest: dest})
	}
	specPath := opts.Spec
	if specPath == "" {
		specPath = "rootfs-builder/specs/minimal.json"
	}
	b.specPath, b.add = filepath.Join(mod, specPath), add
	if b.RootfsDigest, err = b.buildRootfs(ctx, b.Rootfs, nil); err != nil {
		return nil, err
	}
	b.OwnerUID, b.OwnerGID = 65533, 65533
	if u, err := user.Lookup("autonomic"); err == nil {
		b.OwnerUID, _ = strconv.Atoi(u.Uid)
		b.OwnerGID, _ = strconv.Atoi(u.Gid)
	}
	// As install.sh: the kernel's group traverses the state root to read
	// checkpoints/ (the harvest); nothing else there is theirs.
	if err := os.Chown(b.State, 0, b.OwnerGID); err != nil {
		return nil, err
	}
	if err := os.Chmod(b.State, 0o710); err != nil {
		return nil, err
	}
	cg := CgroupV2Mount()
	if cg == "" {
		return nil, fmt.Errorf("no cgroup v2 mount on this host")
	}
	// Each testbed holds its own slice of the uid space, so test packages
	// running in parallel never hand two live domains one range.
	if b.UIDBase, b.poolLock, err = claimSlice(); err != nil {
		return nil, err
	}
	b.CgroupParent = filepath.Join(cg, "autonomic-test-"+filepath.Base(dir)[len("autonomic-testbed-"):])
	b.cfg = map[string]any{
		"state_root": b.State, "rootfs": b.Rootfs, "rootfs_manifest_sha256": b.RootfsDigest,
		"workspaces_root": b.Workspaces, "workspace_owner_uid": b.OwnerUID, "workspace_owner_gid": b.OwnerGID,
		"broker_sockets_root": b.Sockets, "cgroup_parent": b.CgroupParent,
		"uid_pool":   map[string]any{"base": b.UIDBase, "count": 16, "size": 65536},
		"worker_uid": 1000, "worker_gid": 1000,
		"defaults":      map[string]any{"pids": 256, "memory_bytes": 1 << 30, "cpu_millis": 1000, "nproc": 256, "nofile": 1024},
		"max":           map[string]any{"pids": 1024, "memory_bytes": 4 << 30, "cpu_millis": 2000, "nproc": 1024, "nofile": 4096},
		"env_allowlist": []string{"LANG", "TERM", "GOFLAGS", "PROBE", "AUTONOMIC_EPOCH", "AUTONOMIC_LEASE_ID"}, "max_checkpoint_bytes": 256 << 20, "max_checkpoint_entries": 100000,
	}
	return b, b.writeConfig()
}

func (b *Bed) writeConfig() error {
	cb, _ := json.MarshalIndent(b.cfg, "", "  ")
	tmp := b.ConfigPath + ".tmp"
	if err := os.WriteFile(tmp, cb, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, b.ConfigPath)
}

func (b *Bed) buildRootfs(ctx context.Context, dest string, add []rootfs.Add) (string, error) {
	spec, err := rootfs.LoadSpec(b.specPath)
	if err != nil {
		return "", err
	}
	digest, err := rootfs.Build(ctx, spec, dest, rootfs.Options{Add: append(append([]rootfs.Add{}, b.add...), add...)})
	if err != nil {
		return "", fmt.Errorf("build rootfs: %w", err)
	}
	return digest, nil
}

// AddRootfs builds another rootfs, the bed's plus add, at Dir/rootfs-<name>
// and names it in the launcher configuration's rootfses table. It returns
// the rootfs's path and manifest digest.
func (b *Bed) AddRootfs(ctx context.Context, name string, add []rootfs.Add) (string, string, error) {
	dest := filepath.Join(b.Dir, "rootfs-"+name)
	digest, err := b.buildRootfs(ctx, dest, add)
	if err != nil {
		return "", "", err
	}
	return dest, digest, b.NameRootfs(name, dest, digest)
}

// NameRootfs names a built rootfs (dir, with its manifest digest) in the
// launcher configuration's rootfses table, e.g. the agents rootfs from
// the builder's cache.
func (b *Bed) NameRootfs(name, dir, digest string) error {
	table, _ := b.cfg["rootfses"].(map[string]any)
	if table == nil {
		table = map[string]any{}
		b.cfg["rootfses"] = table
	}
	table[name] = map[string]any{"path": dir, "manifest_sha256": digest}
	return b.writeConfig()
}

// WideUIDPool gives the bed a pool of count uid ranges, for benchmarks
// that keep more domains alive than a test does. Its base lies above every
// 16-slot bed's (0x70000000 + 1024 × 16 ranges), so a wide bed and the
// test beds running beside it never hand two live domains one range.
func (b *Bed) WideUIDPool(count uint32) error {
	const region, top = 0xB0000000, 0xF0000000
	if count == 0 || uint64(count)*65536 > top-region {
		return fmt.Errorf("uid pool of %d ranges does not fit", count)
	}
	var rnd [2]byte
	_, _ = rand.Read(rnd[:])
	span := uint32(count) * 65536
	b.UIDBase = region + uint32(binary.BigEndian.Uint16(rnd[:]))%((top-region)/span)*span
	b.cfg["uid_pool"] = map[string]any{"base": b.UIDBase, "count": count, "size": 65536}
	return b.writeConfig()
}

// Static builds the pure-Go, statically linked command pkg (a path
// relative to the module root) into the bed's bin/ and returns its path
// (copied from $AUTONOMIC_TESTBED_PREBUILT where no toolchain is).
func (b *Bed) Static(ctx context.Context, pkg string) (string, error) {
	out := filepath.Join(b.Dir, "bin", filepath.Base(pkg))
	return out, b.build(ctx, pkg, out)
}

func (b *Bed) build(ctx context.Context, pkg, out string, flags ...string) error {
	if prebuilt := os.Getenv(PrebuiltEnv); prebuilt != "" {
		return copyFile(filepath.Join(prebuilt, filepath.Base(out)), out)
	}
	return buildStatic(ctx, b.mod, pkg, out, flags...)
}

// buildStatic builds a pure-Go, statically linked binary of pkg. Without
// the commit stamped in (-buildvcs=false) the same source makes the same
// bytes at any commit, so a rootfs built around it (the agents', dev) is
// found in the builder's cache again by the next run.
func buildStatic(ctx context.Context, mod, pkg, out string, flags ...string) error {
	args := append(append([]string{"build", "-trimpath", "-buildvcs=false"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// Domains is the Linux backend pointed at this bed's launcher, run directly
// (the test process is root).
func (b *Bed) Domains() *domain.Linux {
	return &domain.Linux{LauncherPath: b.Launcher, Direct: true}
}

// Workspace creates a workspace owned by the kernel's account and returns
// its id and host path.
func (b *Bed) Workspace(id string, files map[string]string) (string, error) {
	root := filepath.Join(b.Workspaces, id)
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, b.OwnerUID, b.OwnerGID)
	})
	return root, err
}

// Close removes the bed: its cgroup parent (only if empty) and its files.
func (b *Bed) Close() error {
	b.RemoveCgroups()
	if b.poolLock != nil {
		defer b.poolLock.Close()
	}
	if b.ConfigPath == PrebuiltConfigPath {
		_ = os.Remove(b.ConfigPath)
	}
	b.unmountAll()
	return os.RemoveAll(b.Dir)
}

// unmountAll detaches every mount left under the bed's directory, deepest
// first: the tmpfs of a domain no launcher destroyed (its kernel was
// killed, as a lost host's is), which RemoveAll cannot remove and which
// would otherwise outlive the test in the host's mount table.
func (b *Bed) unmountAll() {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], b.Dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// RemoveCgroups kills whatever a test left running in the bed's domains
// (cgroup.kill, then waits for populated 0), and removes the bed's cgroups,
// keeping its files (for a failed run that leaves them for inspection).
func (b *Bed) RemoveCgroups() {
	if b.CgroupParent == "" {
		return
	}
	entries, _ := os.ReadDir(b.CgroupParent)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		cg := filepath.Join(b.CgroupParent, e.Name())
		_ = os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0)
		for i := 0; i < 500; i++ {
			ev, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
			if err != nil || strings.Contains(string(ev), "populated 0") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = os.Remove(cg)
	}
	_ = os.Remove(b.CgroupParent)
}
