package seccomp

import (
	"fmt"
	"strconv"
	"strings"
)

// Profile is a parsed and validated seccomp profile in the OCI runtime-spec
// LinuxSeccomp shape with moby's extensions. It is a value: it holds no
// libseccomp state, and Compile never changes it. Obtain one from Parse; a
// Profile built by hand is re-validated by Compile and Check.
type Profile struct {
	DefaultAction Action
	// DefaultErrnoRet is the errno the default action returns when it is
	// SCMP_ACT_ERRNO or SCMP_ACT_TRACE (EPERM when the profile leaves it out,
	// as runc does).
	DefaultErrnoRet uint16
	// Architectures are SCMP_ARCH_* names. The native architecture is always
	// part of the program; a syscall from any architecture not listed kills
	// the process.
	Architectures []Arch
	// ArchMap is moby's per-native-architecture list; when present (and
	// Architectures is not), the entry for the native architecture supplies
	// the architectures.
	ArchMap []ArchMapEntry
	// Flags are SECCOMP_FILTER_FLAG_* names; see Program.LoadFlags.
	Flags    []string
	Syscalls []Rule
}

// ArchMapEntry is one element of moby's archMap.
type ArchMapEntry struct {
	Arch      Arch
	SubArches []Arch
}

// Rule is one element of the profile's syscalls array.
type Rule struct {
	Names  []string
	Action Action
	// ErrnoRet is the errno (SCMP_ACT_ERRNO) or tracer message
	// (SCMP_ACT_TRACE); EPERM when the profile leaves it out.
	ErrnoRet uint16
	// Args are ANDed; each compares a distinct argument.
	Args    []Arg
	Comment string
	// Includes and Excludes are moby's conditions. See Doc for how
	// capabilities evaluate.
	Includes Filter
	Excludes Filter
}

// Filter is moby's rule condition.
type Filter struct {
	// Arches are moby/libseccomp native architecture names ("amd64", "x86").
	Arches []string
	// Caps are capability names. The workers this compiler serves hold no
	// capabilities, so a capability condition always evaluates as
	// "none held": a rule that Includes a capability is never selected, and
	// a capability in Excludes never excludes a rule.
	Caps      []string
	MinKernel KernelVersion
}

// Arg is one argument comparison. For SCMP_CMP_MASKED_EQ, Value is the mask
// and ValueTwo the datum, as in runc: (arg & Value) == ValueTwo.
type Arg struct {
	Index    uint
	Value    uint64
	ValueTwo uint64
	Op       Op
}

// Action is an OCI seccomp action name (SCMP_ACT_*).
type Action string

// Op is an OCI seccomp comparison operator name (SCMP_CMP_*).
type Op string

// Arch is an OCI seccomp architecture name (SCMP_ARCH_*).
type Arch string

// The actions a profile may name.
const (
	ActKill        Action = "SCMP_ACT_KILL"
	ActKillProcess Action = "SCMP_ACT_KILL_PROCESS"
	ActKillThread  Action = "SCMP_ACT_KILL_THREAD"
	ActTrap        Action = "SCMP_ACT_TRAP"
	ActErrno       Action = "SCMP_ACT_ERRNO"
	ActTrace       Action = "SCMP_ACT_TRACE"
	ActAllow       Action = "SCMP_ACT_ALLOW"
	ActLog         Action = "SCMP_ACT_LOG"
	ActNotify      Action = "SCMP_ACT_NOTIFY"
)

// The operators a profile may name.
const (
	OpNotEqual     Op = "SCMP_CMP_NE"
	OpLessThan     Op = "SCMP_CMP_LT"
	OpLessEqual    Op = "SCMP_CMP_LE"
	OpEqualTo      Op = "SCMP_CMP_EQ"
	OpGreaterEqual Op = "SCMP_CMP_GE"
	OpGreaterThan  Op = "SCMP_CMP_GT"
	OpMaskedEqual  Op = "SCMP_CMP_MASKED_EQ"
)

func validAction(a Action) bool {
	switch a {
	case ActKill, ActKillProcess, ActKillThread, ActTrap, ActErrno, ActTrace, ActAllow, ActLog, ActNotify:
		return true
	}
	return false
}

func validOp(o Op) bool {
	switch o {
	case OpNotEqual, OpLessThan, OpLessEqual, OpEqualTo, OpGreaterEqual, OpGreaterThan, OpMaskedEqual:
		return true
	}
	return false
}

// archNames maps SCMP_ARCH_* to libseccomp's name for the architecture.
// A function, not a package variable, so that nothing global is mutable.
func archToken(a Arch) (string, bool) {
	switch a {
	case "SCMP_ARCH_X86":
		return "x86", true
	case "SCMP_ARCH_X86_64":
		return "amd64", true
	case "SCMP_ARCH_X32":
		return "x32", true
	case "SCMP_ARCH_ARM":
		return "arm", true
	case "SCMP_ARCH_AARCH64":
		return "arm64", true
	case "SCMP_ARCH_MIPS":
		return "mips", true
	case "SCMP_ARCH_MIPS64":
		return "mips64", true
	case "SCMP_ARCH_MIPS64N32":
		return "mips64n32", true
	case "SCMP_ARCH_MIPSEL":
		return "mipsel", true
	case "SCMP_ARCH_MIPSEL64":
		return "mipsel64", true
	case "SCMP_ARCH_MIPSEL64N32":
		return "mipsel64n32", true
	case "SCMP_ARCH_PPC":
		return "ppc", true
	case "SCMP_ARCH_PPC64":
		return "ppc64", true
	case "SCMP_ARCH_PPC64LE":
		return "ppc64le", true
	case "SCMP_ARCH_S390":
		return "s390", true
	case "SCMP_ARCH_S390X":
		return "s390x", true
	case "SCMP_ARCH_PARISC":
		return "parisc", true
	case "SCMP_ARCH_PARISC64":
		return "parisc64", true
	case "SCMP_ARCH_RISCV64":
		return "riscv64", true
	case "SCMP_ARCH_LOONGARCH64":
		return "loong64", true
	case "SCMP_ARCH_M68K":
		return "m68k", true
	case "SCMP_ARCH_SH":
		return "sh", true
	case "SCMP_ARCH_SHEB":
		return "sheb", true
	}
	return "", false
}

// validFilterArch reports whether s is an architecture name moby's
// includes/excludes use (libseccomp's native names, plus "x32").
func validFilterArch(s string) bool {
	switch s {
	case "x86", "amd64", "x32", "arm", "arm64", "loongarch64", "mips64", "mips64n32",
		"mipsel64", "mips3l64n32", "mipsel", "ppc", "ppc64", "ppc64le", "riscv64", "s390", "s390x":
		return true
	}
	return false
}

// validFlag reports whether s is a seccomp(2) filter flag a profile may ask
// for, and its bit. SPEC_ALLOW is refused outright: the launcher never turns
// off speculative-execution mitigations for a worker.
func flagBit(s string) (uint32, bool) {
	switch s {
	case "SECCOMP_FILTER_FLAG_TSYNC":
		return 1, true
	case "SECCOMP_FILTER_FLAG_LOG":
		return 2, true
	case "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV":
		return 0x20, true
	}
	return 0, false
}

func validCap(s string) bool {
	switch s {
	case "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
		"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
		"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
		"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
		"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
		"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
		"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
		"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
		"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE":
		return true
	}
	return false
}

// KernelVersion is a "<major>.<minor>" kernel version as moby's minKernel
// uses it. The zero value means "unknown".
type KernelVersion struct {
	Major, Minor uint
}

func (k KernelVersion) zero() bool { return k.Major == 0 && k.Minor == 0 }

func (k KernelVersion) String() string {
	if k.zero() {
		return ""
	}
	return fmt.Sprintf("%d.%d", k.Major, k.Minor)
}

// AtLeast reports whether k >= min. An unknown (zero) k is older than
// everything.
func (k KernelVersion) AtLeast(min KernelVersion) bool {
	if k.Major != min.Major {
		return k.Major > min.Major
	}
	return k.Minor >= min.Minor
}

// ParseKernelVersion accepts "X.Y" strictly, and, when release is true, a
// uname release such as "6.18.3-amd64" (only X.Y is kept).
func ParseKernelVersion(s string, release bool) (KernelVersion, error) {
	bad := fmt.Errorf("invalid kernel version %q, want \"<major>.<minor>\"", s)
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 || (!release && len(parts) != 2) {
		return KernelVersion{}, bad
	}
	minor := parts[1]
	if release {
		if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			minor = minor[:i]
		}
	}
	ma, err1 := strconv.ParseUint(parts[0], 10, 16)
	mi, err2 := strconv.ParseUint(minor, 10, 16)
	if err1 != nil || err2 != nil || (ma == 0 && mi == 0) {
		return KernelVersion{}, bad
	}
	return KernelVersion{Major: uint(ma), Minor: uint(mi)}, nil
}
