package main

import (
	"errors"
	"os"
	"testing"

	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/settings"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestCgroupParentCheckedBeforeMkdir: a missing cgroup_parent is created
// only inside a directory proven to be on cgroup v2; elsewhere (a v1
// hierarchy, here a plain directory) nothing is made.
func TestCgroupParentCheckedBeforeMkdir(t *testing.T) {
	dir := t.TempDir()
	l := &launcher{cfg: &settings.Config{CgroupParent: dir + "/domains"}}
	if fd, err := l.openCgroupParent(); !errors.Is(err, protocol.E(protocol.CodeConfigInvalid)) {
		fsat.CloseAll(fd)
		t.Fatalf("cgroup_parent off cgroup v2: %v, want config_invalid", err)
	}
	if _, err := os.Lstat(dir + "/domains"); !os.IsNotExist(err) {
		t.Fatalf("a refused cgroup_parent was created first: %v", err)
	}
}
