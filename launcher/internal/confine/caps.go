package confine

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// KeepCaps leaves every thread with the capabilities in mask (all below
// 32) and no other, in every set, the bounding set included, and sets
// no_new_privs: nothing it execs or is made to exec gains one back.
func KeepCaps(mask uint32) error {
	for c := uintptr(0); c <= 63; c++ {
		if c < 32 && mask&(1<<c) != 0 {
			continue
		}
		if err := AllThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); err == unix.EINVAL {
			break // past the kernel's last capability
		} else if err != nil {
			return err
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: mask, Permitted: mask}}
	if err := AllThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return err
	}
	if err := AllThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return err
	}
	return AllThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
}
