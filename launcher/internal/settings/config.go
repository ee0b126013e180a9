package settings

import (
	"bufio"
	"cmp"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

type Limits struct {
	Pids        uint64 `json:"pids"`
	MemoryBytes uint64 `json:"memory_bytes"`
	CPUMillis   uint64 `json:"cpu_millis"`
	NProc       uint64 `json:"nproc"`
	NoFile      uint64 `json:"nofile"`
}

type UIDPool struct {
	Base  uint32 `json:"base"`
	Count uint32 `json:"count"`
	Size  uint32 `json:"size"`
}

// RootfsRef is a rootfs directory and its identity, its manifest's digest.
type RootfsRef struct {
	Path           string `json:"path"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

// Config is the launcher's whole world: every host path, id range and limit
// it will ever use comes from here, never from a request.
type Config struct {
	StateRoot            string   `json:"state_root"`
	Rootfs               string   `json:"rootfs"`
	RootfsManifestSHA256 string   `json:"rootfs_manifest_sha256"`
	WorkspacesRoot       string   `json:"workspaces_root"`
	WorkspaceOwnerUID    uint32   `json:"workspace_owner_uid"`
	WorkspaceOwnerGID    uint32   `json:"workspace_owner_gid"`
	BrokerSocketsRoot    string   `json:"broker_sockets_root,omitempty"`
	CgroupParent         string   `json:"cgroup_parent"`
	UIDPool              UIDPool  `json:"uid_pool"`
	WorkerUID            uint32   `json:"worker_uid"`
	WorkerGID            uint32   `json:"worker_gid"`
	Defaults             Limits   `json:"defaults"`
	Max                  Limits   `json:"max"`
	EnvAllowlist         []string `json:"env_allowlist"`
	MaxCheckpointBytes   int64    `json:"max_checkpoint_bytes"`
	MaxCheckpointEntries int      `json:"max_checkpoint_entries"`
	// MaxCheckpointStoreBytes caps the whole checkpoint store; 0 means
	// 16 times max_checkpoint_bytes.
	MaxCheckpointStoreBytes int64 `json:"max_checkpoint_store_bytes,omitempty"`
	// MaxCheckpointDomainBytes caps the archives one domain id holds
	// together (until it releases them); 0 means 4 times
	// max_checkpoint_bytes.
	MaxCheckpointDomainBytes int64 `json:"max_checkpoint_domain_bytes,omitempty"`
	// Memory-backed disk bounds of a domain: its /tmp and its upper layer
	// (upper and work dirs), each a tmpfs of this size.
	TmpBytes  uint64 `json:"tmp_bytes,omitempty"`
	DiskBytes uint64 `json:"disk_bytes,omitempty"`

	// Rootfses are the other rootfs trees a create may name; after
	// validate, "" names the default (rootfs, rootfs_manifest_sha256).
	Rootfses map[string]RootfsRef `json:"rootfses,omitempty"`
}

const (
	defaultTmpBytes  = 256 << 20
	defaultDiskBytes = 1 << 30
)

// Load reads, admits and validates the configuration at configPath: the
// file and its directory root-owned and not group/world-writable, no
// symlink, no unknown, duplicated or invalid key.
func Load(configPath string) (*Config, error) {
	bad := func(why string) error { return protocol.Errorf(protocol.CodeConfigInvalid, "%s", why) }
	if err := fsat.CheckRootOwned(path.Dir(configPath), true); err != nil {
		return nil, err
	}
	fd, err := unix.Open(configPath, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeConfigInvalid, "open config: %w", err)
	}
	f := os.NewFile(uintptr(fd), configPath)
	defer f.Close()
	if err := fsat.CheckRootOwnedFd(fd, false); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err != nil || len(b) > 64<<10 {
		return nil, bad("config unreadable or over 64 KiB")
	}
	if err := protocol.CheckShape(b, protocol.Limits{MaxDepth: 4, MaxNodes: 512}); err != nil {
		return nil, protocol.Errorf(protocol.CodeConfigInvalid, "config: %w", err)
	}
	var c Config
	if err := protocol.DecodeStrict(b, &c); err != nil {
		return nil, protocol.Errorf(protocol.CodeConfigInvalid, "config: %w", err)
	}
	return &c, c.validate()
}

func (c *Config) validate() error {
	bad := func(why string) error { return protocol.Errorf(protocol.CodeConfigInvalid, "%s", why) }
	if _, ok := c.Rootfses[""]; ok {
		return bad("rootfses holds an empty name")
	}
	if c.Rootfses == nil {
		c.Rootfses = map[string]RootfsRef{}
	}
	c.Rootfses[""] = RootfsRef{c.Rootfs, c.RootfsManifestSHA256}
	paths := []string{c.StateRoot, c.WorkspacesRoot, c.CgroupParent}
	for name, r := range c.Rootfses {
		if name != "" && !protocol.ValidID(name) || !protocol.ValidDigest(r.ManifestSHA256) {
			return bad("every rootfs needs an id-like name and a lower-case hex SHA-256 of its manifest")
		}
		paths = append(paths, r.Path)
	}
	for _, p := range paths {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return bad("every configured path must be absolute, clean and not /")
		}
	}
	if c.BrokerSocketsRoot != "" && (!path.IsAbs(c.BrokerSocketsRoot) || path.Clean(c.BrokerSocketsRoot) != c.BrokerSocketsRoot) {
		return bad("broker_sockets_root must be absolute and clean")
	}
	p := c.UIDPool
	if p.Count == 0 || p.Size < 65536 || p.Base < 65536 {
		return bad("uid_pool needs count >= 1, size >= 65536 and base >= 65536")
	}
	if uint64(p.Base)+uint64(p.Count)*uint64(p.Size) > 1<<32-2 {
		return bad("uid_pool overflows the uid space")
	}
	if c.WorkerUID == 0 || c.WorkerUID >= p.Size || c.WorkerGID == 0 || c.WorkerGID >= p.Size {
		return bad("worker_uid and worker_gid must be non-zero and inside one range")
	}
	if c.WorkspaceOwnerUID == 0 || c.WorkspaceOwnerGID == 0 {
		return bad("workspace owner must not be root")
	}
	if c.Max.Pids == 0 || c.Max.NProc == 0 || c.Max.NoFile == 0 || c.Max.MemoryBytes == 0 || c.Max.CPUMillis == 0 {
		return bad("every max limit must be set")
	}
	if Exceeds(c.Defaults, c.Max) != "" {
		return bad("a default limit exceeds its max")
	}
	c.TmpBytes, c.DiskBytes = cmp.Or(c.TmpBytes, defaultTmpBytes), cmp.Or(c.DiskBytes, defaultDiskBytes)
	if c.TmpBytes < 1<<20 || c.DiskBytes < 1<<20 {
		return bad("tmp_bytes and disk_bytes must be at least 1 MiB")
	}
	if c.MaxCheckpointBytes <= 0 || c.MaxCheckpointEntries <= 0 || c.MaxCheckpointStoreBytes < 0 || c.MaxCheckpointDomainBytes < 0 || c.MaxCheckpointBytes > 1<<40 {
		return bad("checkpoint caps must be positive and at most 1 TiB")
	}
	if c.MaxCheckpointStoreBytes == 0 {
		c.MaxCheckpointStoreBytes = 16 * c.MaxCheckpointBytes
	}
	c.MaxCheckpointDomainBytes = cmp.Or(c.MaxCheckpointDomainBytes, 4*c.MaxCheckpointBytes)
	for _, k := range c.EnvAllowlist {
		if k == "" || strings.ContainsAny(k, "= \x00") {
			return bad("env_allowlist holds an invalid name")
		}
	}
	// The pool must never overlap a host account: a domain uid that is also
	// a host user would own that user's files.
	// Nor a range the host delegates to its users' own user namespaces
	// (newuidmap): their processes would share the domain's ids.
	for _, db := range []string{"/etc/subuid", "/etc/subgid"} {
		if id, ok := subidsInRange(db, p.Base, p.Base+p.Count*p.Size); ok {
			return protocol.Errorf(protocol.CodeConfigInvalid, "%s delegates id %d inside uid_pool", db, id)
		}
	}
	for _, db := range []string{"/etc/passwd", "/etc/group"} {
		if id, ok := accountInRange(db, p.Base, p.Base+p.Count*p.Size); ok {
			return protocol.Errorf(protocol.CodeConfigInvalid, "%s has id %d inside uid_pool", db, id)
		}
	}
	if err := fsat.CheckRootOwned(c.StateRoot, true); err != nil {
		return err
	}
	return nil
}

// Exceeds names the first limit in a that is above its max in m.
func Exceeds(a, m Limits) string {
	switch {
	case a.Pids > m.Pids:
		return "pids"
	case a.MemoryBytes > m.MemoryBytes:
		return "memory_bytes"
	case a.CPUMillis > m.CPUMillis:
		return "cpu_millis"
	case a.NProc > m.NProc:
		return "nproc"
	case a.NoFile > m.NoFile:
		return "nofile"
	}
	return ""
}

func accountInRange(db string, lo, hi uint32) (uint32, bool) {
	f, err := os.Open(db)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err == nil && uint32(id) >= lo && uint32(id) < hi {
			return uint32(id), true
		}
	}
	return 0, false
}

// subidsInRange reports the first id of a subordinate range in db
// ("name:start:count" lines) that overlaps [lo, hi).
func subidsInRange(db string, lo, hi uint32) (uint32, bool) {
	f, err := os.Open(db)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(strings.TrimSpace(s.Text()), ":")
		if len(fields) != 3 {
			continue
		}
		start, err1 := strconv.ParseUint(fields[1], 10, 32)
		count, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 {
			continue
		}
		if start < uint64(hi) && start+count > uint64(lo) {
			return uint32(max(start, uint64(lo))), true
		}
	}
	return 0, false
}

// EffectiveLimits are a request's limits: each asked for, or the default,
// and none above its max.
func (c *Config) EffectiveLimits(rl *protocol.ResourceLimits) (Limits, error) {
	d, m := c.Defaults, c.Max
	if rl != nil {
		pick := func(v, def uint64) uint64 {
			if v == 0 {
				return def
			}
			return v
		}
		d = Limits{Pids: pick(rl.Pids, d.Pids), MemoryBytes: pick(rl.MemoryBytes, d.MemoryBytes), CPUMillis: pick(rl.CPUMillis, d.CPUMillis),
			NProc: pick(rl.NProc, d.NProc), NoFile: pick(rl.NoFile, d.NoFile)}
	}
	if name := Exceeds(d, m); name != "" {
		return d, protocol.Errorf(protocol.CodeLimitExceeded, "%s", name)
	}
	return d, nil
}

// WorkerEnv builds a worker's environment from the allowlist alone (on the
// fixed PATH and home); a key outside it is refused rather than dropped, so
// the kernel learns its mistake.
func (c *Config) WorkerEnv(req map[string]string, home string) ([]string, error) {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home}
	keys := make([]string, 0, len(req))
	for k := range req {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(c.EnvAllowlist, k) {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "env key not allowed")
		}
		env = slices.DeleteFunc(env, func(e string) bool { return len(e) > len(k) && e[:len(k)+1] == k+"=" })
		env = append(env, k+"="+req[k])
	}
	return env, nil
}
