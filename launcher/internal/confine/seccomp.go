package confine

import (
	"encoding/binary"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// InstallFilter loads one classic-BPF program with seccomp(2). It returns
// the listener descriptor when flags ask for one. SPEC_ALLOW is never used.
func InstallFilter(raw []byte, flags uintptr) (int, error) {
	prog := make([]unix.SockFilter, len(raw)/8)
	for i := range prog {
		rec := raw[i*8:]
		prog[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(rec), Jt: rec[2], Jf: rec[3], K: binary.LittleEndian.Uint32(rec[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// ProgramUsesNotify reports whether a program can return USER_NOTIF, which
// a host without user notification cannot honour.
func ProgramUsesNotify(raw []byte) bool {
	for i := 0; i+8 <= len(raw); i += 8 {
		code := binary.LittleEndian.Uint16(raw[i:])
		k := binary.LittleEndian.Uint32(raw[i+4:])
		if code == unix.BPF_RET|unix.BPF_K && k&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_USER_NOTIF {
			return true
		}
	}
	return false
}

func HostSeccompActions() map[string]bool {
	b, _ := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	out := map[string]bool{}
	for _, a := range strings.Fields(string(b)) {
		out[a] = true
	}
	return out
}
