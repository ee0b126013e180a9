package main

import (
	"os"
	"testing"

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
	werr := writeFileAt(dirfd, "cgroup", []byte("8537"), 0o600)
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
	if err := writeFileAt(dirfd, "cgroup", []byte("8537"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dir + "/cgroup"); string(b) != "8537" {
		t.Fatalf("record %q", b)
	}
}
