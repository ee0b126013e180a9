package seccomp

import libseccomp "github.com/seccomp/libseccomp-golang"

// SyscallName names a native system call number as libseccomp does, or
// returns "" for one it does not know. The launcher reports violations by
// number only (a name table would be most of its size); the kernel names
// them with this.
func SyscallName(nr int32) string {
	native, err := libseccomp.GetNativeArch()
	if nr < 0 || err != nil {
		return ""
	}
	name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(native)
	if err != nil {
		return ""
	}
	return name
}
