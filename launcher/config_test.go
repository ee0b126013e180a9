package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/privileged"
	"github.com/autonomic-kernel/autonomic/protocol"
)

func validConfig(dir string) map[string]any {
	return map[string]any{
		"state_root": dir, "rootfs": "/nonexistent/rootfs", "rootfs_manifest_sha256": strings.Repeat("a", 64),
		"workspaces_root": "/nonexistent/ws", "workspace_owner_uid": 999, "workspace_owner_gid": 999,
		"cgroup_parent": "/sys/fs/cgroup/unified/x", "uid_pool": map[string]any{"base": 1879048192, "count": 4, "size": 65536},
		"worker_uid": 1000, "worker_gid": 1000,
		"defaults":      map[string]any{"pids": 1, "memory_bytes": 1, "cpu_millis": 1, "nproc": 1, "nofile": 1},
		"max":           map[string]any{"pids": 2, "memory_bytes": 2, "cpu_millis": 2, "nproc": 2, "nofile": 2},
		"env_allowlist": []string{"LANG"}, "max_checkpoint_bytes": 1, "max_checkpoint_entries": 1,
	}
}

func rootfsEntry(path string, digestLen int) map[string]any {
	return map[string]any{"path": path, "manifest_sha256": strings.Repeat("b", digestLen)}
}

// writeConfig installs a config for this test and points the build-time
// path at it.
func writeConfig(t *testing.T, body []byte, mode os.FileMode) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "launcher.json")
	if err := os.WriteFile(p, body, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	old := configPath
	configPath = p
	t.Cleanup(func() { configPath = old })
}

func TestConfigValidation(t *testing.T) {
	privileged.Require(t) // ownership checks need root-owned files
	state := t.TempDir()
	mutate := func(f func(m map[string]any)) []byte {
		m := validConfig(state)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name string
		body []byte
		mode os.FileMode
		ok   bool
	}{
		{"valid", mutate(func(map[string]any) {}), 0o644, true},
		{"group writable", mutate(func(map[string]any) {}), 0o664, false},
		{"world writable", mutate(func(map[string]any) {}), 0o646, false},
		{"unknown key", mutate(func(m map[string]any) { m["shell"] = "/bin/sh" }), 0o644, false},
		{"duplicate key", []byte(`{"state_root":"/a","state_root":"/b"}`), 0o644, false},
		{"relative path", mutate(func(m map[string]any) { m["rootfs"] = "rootfs" }), 0o644, false},
		{"unclean path", mutate(func(m map[string]any) { m["rootfs"] = "/a/../b" }), 0o644, false},
		{"root path", mutate(func(m map[string]any) { m["workspaces_root"] = "/" }), 0o644, false},
		{"bad digest", mutate(func(m map[string]any) { m["rootfs_manifest_sha256"] = "abc" }), 0o644, false},
		{"named rootfs", mutate(func(m map[string]any) { m["rootfses"] = map[string]any{"agents": rootfsEntry("/srv/agents", 64)} }), 0o644, true},
		{"rootfs named empty", mutate(func(m map[string]any) { m["rootfses"] = map[string]any{"": rootfsEntry("/srv/agents", 64)} }), 0o644, false},
		{"rootfs named with dots", mutate(func(m map[string]any) { m["rootfses"] = map[string]any{"..": rootfsEntry("/srv/agents", 64)} }), 0o644, false},
		{"named rootfs relative", mutate(func(m map[string]any) { m["rootfses"] = map[string]any{"agents": rootfsEntry("srv/agents", 64)} }), 0o644, false},
		{"named rootfs bad digest", mutate(func(m map[string]any) { m["rootfses"] = map[string]any{"agents": rootfsEntry("/srv/agents", 63)} }), 0o644, false},
		{"named rootfs unknown key", mutate(func(m map[string]any) {
			m["rootfses"] = map[string]any{"agents": map[string]any{"path": "/srv/agents", "manifest_sha256": strings.Repeat("a", 64), "verify": false}}
		}), 0o644, false},
		{"pool overflow", mutate(func(m map[string]any) {
			m["uid_pool"] = map[string]any{"base": 4294000000, "count": 100, "size": 65536}
		}), 0o644, false},
		{"pool covering root", mutate(func(m map[string]any) { m["uid_pool"] = map[string]any{"base": 0, "count": 1, "size": 65536} }), 0o644, false},
		{"worker root", mutate(func(m map[string]any) { m["worker_uid"] = 0 }), 0o644, false},
		{"workspace owner root", mutate(func(m map[string]any) { m["workspace_owner_uid"] = 0 }), 0o644, false},
		{"default above max", mutate(func(m map[string]any) { m["defaults"].(map[string]any)["pids"] = 3 }), 0o644, false},
		{"env with equals", mutate(func(m map[string]any) { m["env_allowlist"] = []string{"A=B"} }), 0o644, false},
		{"state root world writable", mutate(func(m map[string]any) { m["state_root"] = "/tmp" }), 0o644, false},
		{"store cap set", mutate(func(m map[string]any) { m["max_checkpoint_store_bytes"] = 10 }), 0o644, true},
		{"store cap negative", mutate(func(m map[string]any) { m["max_checkpoint_store_bytes"] = -1 }), 0o644, false},
		{"checkpoint cap above 1 TiB", mutate(func(m map[string]any) { m["max_checkpoint_bytes"] = int64(1)<<40 + 1 }), 0o644, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeConfig(t, c.body, c.mode)
			_, err := loadConfig()
			if c.ok && err != nil {
				t.Fatalf("valid config refused: %v", err)
			}
			if !c.ok && !errors.Is(err, protocol.E(protocol.CodeConfigInvalid)) {
				t.Fatalf("got %v, want config_invalid", err)
			}
		})
	}
}

func TestConfigSymlinkRefused(t *testing.T) {
	privileged.Require(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "real.json")
	b, _ := json.Marshal(validConfig(t.TempDir()))
	if err := os.WriteFile(real, b, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "launcher.json")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	old := configPath
	configPath = link
	defer func() { configPath = old }()
	if _, err := loadConfig(); !errors.Is(err, protocol.E(protocol.CodeConfigInvalid)) {
		t.Fatalf("symlinked config: %v", err)
	}
}
