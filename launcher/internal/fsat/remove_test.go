package fsat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveBeneathDeepTree: a chain of 21,000 directories (with files and
// symlinks along it) is removed under a descriptor limit of 32, which a
// walk holding one descriptor per level would exhaust at once.
func TestRemoveBeneathDeepTree(t *testing.T) {
	root := t.TempDir()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Mkdirat(fd, "tree", 0o755); err != nil {
		t.Fatal(err)
	}
	cur, err := unix.Openat(fd, "tree", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 21000; i++ {
		if i%1000 == 0 {
			_ = unix.Symlinkat("/etc", cur, "link")
			f, _ := unix.Openat(cur, "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
			unix.Close(f)
		}
		if err := unix.Mkdirat(cur, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(cur, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(cur)
		if err != nil {
			t.Fatal(err)
		}
		cur = next
	}
	unix.Close(cur)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 32
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	err = RemoveAll(fd, "tree")
	_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	if err != nil {
		t.Fatalf("removeBeneath: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "tree")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tree survived: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal("removal followed a symlink out")
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 || strings.Contains(root, "tree") {
		t.Fatalf("left behind: %v", entries)
	}
}
