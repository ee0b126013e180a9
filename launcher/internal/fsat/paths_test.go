package fsat

import (
	"errors"
	"os"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// TestStateWriteIsWhole: under a file-size limit that cuts the data short
// (a caller's RLIMIT_FSIZE, which once truncated a cgroup id), writeFileAt
// fails and leaves no partial record.
func TestStateWriteIsWhole(t *testing.T) {
	dir := t.TempDir()
	dirfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	// Rlimits are the process's: restore before anything else writes.
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 3, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	werr := WriteFile(dirfd, "cgroup", []byte("8537"), 0o600)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if werr == nil {
		b, _ := os.ReadFile(dir + "/cgroup")
		t.Fatalf("a write cut at 3 bytes succeeded, record %q", b)
	}
	if _, err := os.Lstat(dir + "/cgroup"); !os.IsNotExist(err) {
		t.Fatalf("a failed write left its record: %v", err)
	}
	if err := WriteFile(dirfd, "cgroup", []byte("8537"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dir + "/cgroup"); string(b) != "8537" {
		t.Fatalf("record %q", b)
	}
}

// TestConfiguredRootRefusesSymlinks: a configured root is refused when any
// component on its way, not only the last, is a symlink (issue 27,
// finding 7): whoever owns a directory on the path could swap one in.
func TestConfiguredRootRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/real/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir+"/real", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	fd, err := OpenRoot(dir + "/real/sub")
	if err != nil {
		t.Fatalf("plain path refused: %v", err)
	}
	unix.Close(fd)
	for _, p := range []string{dir + "/link/sub", dir + "/link", "real/sub"} {
		if fd, err := OpenRoot(p); !errors.Is(err, protocol.E(protocol.CodeConfigInvalid)) {
			CloseAll(fd)
			t.Errorf("openRoot(%q): %v, want config_invalid", p, err)
		}
	}
}
