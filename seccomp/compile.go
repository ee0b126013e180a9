package seccomp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Options adapt compilation to a host. The zero value is the strictest.
type Options struct {
	// NotifyUnsupported lowers every SCMP_ACT_NOTIFY to
	// SCMP_ACT_KILL_PROCESS, for hosts without seccomp user notification.
	// The fallback is still uncatchable by the worker, unlike SIGSYS.
	NotifyUnsupported bool
	// Kernel evaluates moby minKernel conditions. The zero value means
	// unknown, which counts as older than every minKernel: an allow rule
	// gated on a kernel version is left out rather than assumed.
	Kernel KernelVersion
}

// ErrShadowed reports a rule that libseccomp would silently override: no
// input the rule matches is decided by it.
var ErrShadowed = errors.New("rule never decides")

// ErrTooLong reports a program longer than the kernel accepts.
var ErrTooLong = errors.New("program too long")

// Compile turns a profile into a BPF program for the native architecture.
// It is a pure function of (profile, opts, libseccomp version): the same
// inputs give byte-identical output. It fails rather than produce a program
// in which some rule of the profile can never take effect.
func Compile(p Profile, opts Options) (Program, error) {
	c, err := compile(p, opts)
	if err != nil {
		return Program{}, err
	}
	return c.prog, nil
}

// Check validates a profile completely: it compiles it and verifies that
// every rule decides at least one input. A nil error means Compile succeeds.
func Check(p Profile, opts Options) error {
	_, err := compile(p, opts)
	return err
}

// entry is one (rule, syscall name) pair as the compiler handled it.
type entry struct {
	rule   int
	name   string
	nr     int32 // native number, or a negative libseccomp pseudo-number
	ret    uint32
	status entryStatus
	why    string // for statusNotSelected
}

type entryStatus int

const (
	statusAdded entryStatus = iota
	statusSameAsDefault
	statusNotSelected
	statusNotNative
)

type compiled struct {
	prog       Program
	profile    Profile
	opts       Options
	defaultRet uint32
	entries    []entry
	auditArch  uint32
}

func compile(p Profile, opts Options) (*compiled, error) {
	if err := revalidate(p); err != nil {
		return nil, err
	}
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, fmt.Errorf("seccomp: native architecture: %w", err)
	}
	audit, err := auditArch(native)
	if err != nil {
		return nil, err
	}
	c := &compiled{profile: p, opts: opts, auditArch: audit}
	defAct, defRet := action(p.DefaultAction, p.DefaultErrnoRet, opts)
	c.defaultRet = defRet

	f, err := libseccomp.NewFilter(defAct)
	if err != nil {
		return nil, fmt.Errorf("seccomp: new filter: %w", err)
	}
	defer f.Release()
	// A syscall from an architecture the profile does not list kills the
	// process: an errno would let a worker probe foreign ABIs (x32, i386)
	// for gaps in the native rules.
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, fmt.Errorf("seccomp: bad-arch action: %w", err)
	}
	binaryTree := f.SetOptimize(2) == nil // libseccomp >= 2.5: O(log n) dispatch
	for _, a := range filterArches(p, native) {
		tok, _ := archToken(a)
		arch, err := libseccomp.GetArchFromString(tok)
		if err != nil {
			return nil, &ParseError{Rule: -1, Field: "architectures", Err: fmt.Errorf("%w: %s: %v", ErrUnknownArch, a, err)}
		}
		if arch == native {
			continue
		}
		if err := f.AddArch(arch); err != nil {
			return nil, &ParseError{Rule: -1, Field: "architectures", Err: fmt.Errorf("%w: libseccomp refuses %s: %v", ErrUnknownArch, a, err)}
		}
	}
	nativeName := mobyArchName()
	maxNr := -1
	for i, r := range p.Syscalls {
		ok, why := selected(r, nativeName, opts.Kernel)
		act, ret := action(r.Action, r.ErrnoRet, opts)
		var conds []libseccomp.ScmpCondition
		for _, a := range r.Args {
			var cond libseccomp.ScmpCondition
			if a.Op == OpMaskedEqual {
				cond, err = libseccomp.MakeCondition(a.Index, libseccomp.CompareMaskedEqual, a.Value, a.ValueTwo)
			} else {
				cond, err = libseccomp.MakeCondition(a.Index, compareOp(a.Op), a.Value)
			}
			if err != nil {
				return nil, &ParseError{Rule: i, Names: r.Names, Field: "args", Err: err}
			}
			conds = append(conds, cond)
		}
		for _, name := range r.Names {
			e := entry{rule: i, name: name, ret: ret}
			nr, err := libseccomp.GetSyscallFromNameByArch(name, native)
			if err == nil && nr >= 0 {
				e.nr = int32(nr)
				// Every syscall the profile names, selected or not, is one it
				// knows about: only numbers above all of them are "newer".
				maxNr = max(maxNr, int(nr))
			} else {
				any, err := libseccomp.GetSyscallFromName(name)
				if err != nil {
					return nil, &ParseError{Rule: i, Names: r.Names, Field: "names", Err: fmt.Errorf("%w: %q", ErrUnknownSyscall, name)}
				}
				e.nr = int32(any)
				e.status = statusNotNative
			}
			switch {
			case !ok:
				e.status, e.why = statusNotSelected, why
			case ret == defRet:
				// libseccomp refuses a rule equal to the default action; it is
				// still checked below so that it cannot hide a conflict.
				if e.status != statusNotNative {
					e.status = statusSameAsDefault
				}
			default:
				sc := libseccomp.ScmpSyscall(e.nr)
				if len(conds) == 0 {
					err = f.AddRule(sc, act)
				} else {
					err = f.AddRuleConditional(sc, act, conds)
				}
				if err != nil {
					return nil, &ParseError{Rule: i, Names: r.Names, Err: fmt.Errorf("libseccomp refuses %s: %w", name, err)}
				}
			}
			c.entries = append(c.entries, e)
		}
	}
	ins, err := exportBPF(f)
	if err != nil {
		return nil, err
	}
	stubAbove := -1
	if wantsENOSYSStub(p, defRet) && maxNr >= 0 {
		ins = append(enosysStub(audit, uint32(maxNr)), ins...)
		stubAbove = maxNr
	}
	if len(ins) > MaxInstructions {
		return nil, fmt.Errorf("seccomp: %w: %d instructions, the kernel accepts at most %d", ErrTooLong, len(ins), MaxInstructions)
	}
	c.prog = newProgram(ins)
	c.prog.ENOSYSAbove = stubAbove
	c.prog.BinaryTree = binaryTree
	maj, min, mic := libseccomp.GetLibraryVersion()
	c.prog.Libseccomp = fmt.Sprintf("%d.%d.%d", maj, min, mic)
	for _, fl := range p.Flags {
		bit, _ := flagBit(fl)
		c.prog.LoadFlags |= bit
	}
	if err := c.checkLive(); err != nil {
		return nil, err
	}
	return c, nil
}

// revalidate re-applies Parse's value checks to a Profile that may have been
// built in Go rather than parsed.
func revalidate(p Profile) error {
	if !validAction(p.DefaultAction) {
		return &ParseError{Rule: -1, Field: "defaultAction", Err: fmt.Errorf("%w: %q", ErrUnknownAction, p.DefaultAction)}
	}
	for _, a := range p.Architectures {
		if _, ok := archToken(a); !ok {
			return &ParseError{Rule: -1, Field: "architectures", Err: fmt.Errorf("%w: %q", ErrUnknownArch, a)}
		}
	}
	for _, fl := range p.Flags {
		if _, ok := flagBit(fl); !ok {
			return &ParseError{Rule: -1, Field: "flags", Err: fmt.Errorf("%w: %q", ErrUnknownFlag, fl)}
		}
	}
	for i, r := range p.Syscalls {
		fail := func(field string, err error) error {
			return &ParseError{Rule: i, Names: r.Names, Field: field, Err: err}
		}
		if len(r.Names) == 0 {
			return fail("names", ErrMissingField)
		}
		for _, n := range r.Names {
			if !knownSyscall(n) {
				return fail("names", fmt.Errorf("%w: %q", ErrUnknownSyscall, n))
			}
		}
		if !validAction(r.Action) {
			return fail("action", fmt.Errorf("%w: %q", ErrUnknownAction, r.Action))
		}
		if r.ErrnoRet > 4095 {
			return fail("errnoRet", fmt.Errorf("%w: errno %d exceeds 4095", ErrInvalid, r.ErrnoRet))
		}
		seen := map[uint]bool{}
		for j, a := range r.Args {
			field := fmt.Sprintf("args[%d]", j)
			if a.Index > 5 {
				return fail(field, fmt.Errorf("%w: %d", ErrArgIndex, a.Index))
			}
			if seen[a.Index] {
				return fail(field, fmt.Errorf("%w: argument %d compared twice", ErrDuplicate, a.Index))
			}
			seen[a.Index] = true
			if !validOp(a.Op) {
				return fail(field, fmt.Errorf("%w: %q", ErrUnknownOp, a.Op))
			}
		}
	}
	return nil
}

// filterArches lists the architectures the program covers besides the
// native one, which is always present.
func filterArches(p Profile, native libseccomp.ScmpArch) []Arch {
	if len(p.Architectures) > 0 {
		return p.Architectures
	}
	for _, m := range p.ArchMap {
		tok, _ := archToken(m.Arch)
		if a, err := libseccomp.GetArchFromString(tok); err == nil && a == native {
			return append([]Arch{m.Arch}, m.SubArches...)
		}
	}
	return nil
}

// selected evaluates moby's includes/excludes for this host. Capabilities
// always evaluate as "none held" (the worker has none).
func selected(r Rule, nativeName string, kernel KernelVersion) (bool, string) {
	ex, in := r.Excludes, r.Includes
	for _, a := range ex.Arches {
		if a == nativeName {
			return false, "excludes.arches names " + a
		}
	}
	if !ex.MinKernel.zero() && kernel.AtLeast(ex.MinKernel) {
		return false, "excludes.minKernel " + ex.MinKernel.String()
	}
	if len(in.Arches) > 0 {
		found := false
		for _, a := range in.Arches {
			found = found || a == nativeName
		}
		if !found {
			return false, "includes.arches lacks " + nativeName
		}
	}
	if len(in.Caps) > 0 {
		return false, "includes.caps " + strings.Join(in.Caps, ",") + " (workers hold no capabilities)"
	}
	if !in.MinKernel.zero() && !kernel.AtLeast(in.MinKernel) {
		k := kernel.String()
		if k == "" {
			k = "unknown"
		}
		return false, "includes.minKernel " + in.MinKernel.String() + " (kernel " + k + ")"
	}
	return true, ""
}

// action maps a profile action to libseccomp's and to the SECCOMP_RET_*
// value the kernel sees.
func action(a Action, errno uint16, opts Options) (libseccomp.ScmpAction, uint32) {
	if a == ActNotify && opts.NotifyUnsupported {
		a = ActKillProcess
	}
	switch a {
	case ActKill, ActKillThread:
		return libseccomp.ActKillThread, unix.SECCOMP_RET_KILL_THREAD
	case ActKillProcess:
		return libseccomp.ActKillProcess, unix.SECCOMP_RET_KILL_PROCESS
	case ActTrap:
		return libseccomp.ActTrap, unix.SECCOMP_RET_TRAP
	case ActErrno:
		return libseccomp.ActErrno.SetReturnCode(int16(errno)), unix.SECCOMP_RET_ERRNO | uint32(errno)
	case ActTrace:
		return libseccomp.ActTrace.SetReturnCode(int16(errno)), unix.SECCOMP_RET_TRACE | uint32(errno)
	case ActLog:
		return libseccomp.ActLog, unix.SECCOMP_RET_LOG
	case ActNotify:
		return libseccomp.ActNotify, unix.SECCOMP_RET_USER_NOTIF
	}
	return libseccomp.ActAllow, unix.SECCOMP_RET_ALLOW
}

func compareOp(o Op) libseccomp.ScmpCompareOp {
	switch o {
	case OpNotEqual:
		return libseccomp.CompareNotEqual
	case OpLessThan:
		return libseccomp.CompareLess
	case OpLessEqual:
		return libseccomp.CompareLessOrEqual
	case OpEqualTo:
		return libseccomp.CompareEqual
	case OpGreaterEqual:
		return libseccomp.CompareGreaterEqual
	case OpGreaterThan:
		return libseccomp.CompareGreater
	}
	return libseccomp.CompareMaskedEqual
}

// matches evaluates one comparison the way libseccomp compiles it on a
// 64-bit architecture.
func (a Arg) matches(v uint64) bool {
	switch a.Op {
	case OpNotEqual:
		return v != a.Value
	case OpLessThan:
		return v < a.Value
	case OpLessEqual:
		return v <= a.Value
	case OpEqualTo:
		return v == a.Value
	case OpGreaterEqual:
		return v >= a.Value
	case OpGreaterThan:
		return v > a.Value
	case OpMaskedEqual:
		return v&a.Value == a.ValueTwo
	}
	return false
}

func mobyArchName() string {
	switch runtime.GOARCH {
	case "386":
		return "x86"
	case "loong64":
		return "loongarch64"
	case "mips64le":
		return "mipsel64"
	case "mipsle":
		return "mipsel"
	}
	return runtime.GOARCH
}

func auditArch(a libseccomp.ScmpArch) (uint32, error) {
	switch a {
	case libseccomp.ArchAMD64:
		return unix.AUDIT_ARCH_X86_64, nil
	case libseccomp.ArchARM64:
		return unix.AUDIT_ARCH_AARCH64, nil
	case libseccomp.ArchRISCV64:
		return unix.AUDIT_ARCH_RISCV64, nil
	case libseccomp.ArchPPC64LE:
		return unix.AUDIT_ARCH_PPC64LE, nil
	case libseccomp.ArchS390X:
		return unix.AUDIT_ARCH_S390X, nil
	}
	return 0, fmt.Errorf("seccomp: native architecture %s is not supported by this compiler", a)
}

// x32SyscallBit is __X32_SYSCALL_BIT.
const x32SyscallBit = 0x40000000

// wantsENOSYSStub: with a restrictive default, a syscall newer than the
// profile must answer ENOSYS, not EPERM, so that libc falls back to an older
// call (runc does the same); with a permissive default there is nothing to fall
// back from.
func wantsENOSYSStub(p Profile, defRet uint32) bool {
	switch p.DefaultAction {
	case ActAllow, ActLog:
		return false
	}
	return defRet != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS)
}

// enosysStub answers ENOSYS for native syscalls numbered above maxNr and
// falls through to libseccomp's program otherwise. Classic BPF jumps are
// forward and relative, so prepending cannot disturb libseccomp's code, which
// reloads the architecture itself. Numbers with the x32 bit are left to
// libseccomp, which kills them as a foreign architecture.
func enosysStub(audit, maxNr uint32) []unix.SockFilter {
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},                    // A = arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 4, K: audit}, // foreign arch: to libseccomp
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},                    // A = nr
		{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: 2, Jf: 0, K: x32SyscallBit},
		{Code: unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, Jt: 0, Jf: 1, K: maxNr},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}
}

// exportBPF exports through a memfd: libseccomp 2.5.4 has no in-memory
// export, and a memfd, unlike a pipe, cannot deadlock on a large program.
func exportBPF(f *libseccomp.ScmpFilter) ([]unix.SockFilter, error) {
	fd, err := unix.MemfdCreate("autonomic-seccomp-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("seccomp: memfd_create: %w", err)
	}
	file := os.NewFile(uintptr(fd), "autonomic-seccomp-bpf")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seccomp: rewind export: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(file, (MaxInstructions+1)*instructionSize))
	if err != nil {
		return nil, fmt.Errorf("seccomp: read export: %w", err)
	}
	if len(raw) > MaxInstructions*instructionSize {
		return nil, fmt.Errorf("seccomp: %w: libseccomp produced more than %d instructions", ErrTooLong, MaxInstructions)
	}
	return DecodeInstructions(raw)
}
