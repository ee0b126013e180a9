package fsat

import (
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

func CheckRootOwned(p string, dir bool) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return protocol.Errorf(protocol.CodeConfigInvalid, "open %s: %w", p, err)
	}
	defer unix.Close(fd)
	return CheckRootOwnedFd(fd, dir)
}

// CheckRootOwnedFd refuses anything another account could have written: a
// Config or state root that is not root's alone is not the launcher's.
func CheckRootOwnedFd(fd int, dir bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return protocol.Errorf(protocol.CodeConfigInvalid, "stat: %w", err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if st.Uid != 0 || st.Mode&0o022 != 0 || isDir != dir || (!dir && st.Mode&unix.S_IFMT != unix.S_IFREG) {
		return protocol.Errorf(protocol.CodeConfigInvalid, "not root-owned, group/world-writable or wrong type")
	}
	return nil
}
