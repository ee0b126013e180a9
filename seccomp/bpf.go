package seccomp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxInstructions is the kernel's BPF_MAXINSNS: a longer program is refused
// by seccomp(2), so the compiler refuses it first.
const MaxInstructions = 4096

// instructionSize is sizeof(struct sock_filter): u16 code, u8 jt, u8 jf, u32 k.
const instructionSize = 8

// Program is a compiled seccomp filter for the native architecture. It is a
// value: nothing in it refers back to libseccomp.
type Program struct {
	// Instructions is the classic-BPF program, ready for
	// seccomp(SECCOMP_SET_MODE_FILTER).
	Instructions []unix.SockFilter
	// SHA256 is the lowercase hex SHA-256 of Bytes().
	SHA256 string
	// Count is len(Instructions).
	Count int
	// ENOSYSAbove is the largest native syscall number the profile names;
	// larger numbers answer ENOSYS (runc's behaviour, so that libc falls back
	// from syscalls newer than the profile). -1 when no such stub is present.
	ENOSYSAbove int
	// LoadFlags are the seccomp(2) SECCOMP_FILTER_FLAG_* bits the profile asks
	// for. They are advisory: the installer decides which flags it uses.
	LoadFlags uint32
	// BinaryTree reports that libseccomp laid the syscalls out as a binary
	// tree (SCMP_FLTATR_CTL_OPTIMIZE=2, libseccomp >= 2.5).
	BinaryTree bool
	// Libseccomp is the libseccomp version that generated the program;
	// output is deterministic for a given profile and library version.
	Libseccomp string
}

// Bytes returns the raw program: the little-endian byte array of
// struct sock_filter, 8 bytes per instruction. This is the format the
// launcher receives and the format SHA256 is computed over.
func (p Program) Bytes() []byte { return EncodeInstructions(p.Instructions) }

// EncodeInstructions serialises instructions as little-endian struct
// sock_filter records.
func EncodeInstructions(ins []unix.SockFilter) []byte {
	b := make([]byte, 0, len(ins)*instructionSize)
	for _, in := range ins {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// DecodeInstructions parses a raw little-endian sock_filter array.
func DecodeInstructions(raw []byte) ([]unix.SockFilter, error) {
	if len(raw) == 0 || len(raw)%instructionSize != 0 {
		return nil, fmt.Errorf("seccomp: raw program length %d is not a positive multiple of %d", len(raw), instructionSize)
	}
	if len(raw)/instructionSize > MaxInstructions {
		return nil, fmt.Errorf("seccomp: raw program has %d instructions, the kernel accepts at most %d", len(raw)/instructionSize, MaxInstructions)
	}
	ins := make([]unix.SockFilter, len(raw)/instructionSize)
	for i := range ins {
		r := raw[i*instructionSize:]
		ins[i] = unix.SockFilter{
			Code: binary.LittleEndian.Uint16(r[0:2]),
			Jt:   r[2],
			Jf:   r[3],
			K:    binary.LittleEndian.Uint32(r[4:8]),
		}
	}
	return ins, nil
}

func newProgram(ins []unix.SockFilter) Program {
	sum := sha256.Sum256(EncodeInstructions(ins))
	return Program{Instructions: ins, SHA256: hex.EncodeToString(sum[:]), Count: len(ins), ENOSYSAbove: -1}
}

// Data is struct seccomp_data: what a filter sees of one system call.
type Data struct {
	Nr                 int32
	Arch               uint32
	InstructionPointer uint64
	Args               [6]uint64
}

// load32 reads the 32-bit word at byte offset off of struct seccomp_data as
// the kernel lays it out on a little-endian machine.
func (d *Data) load32(off uint32) (uint32, bool) {
	switch {
	case off == 0:
		return uint32(d.Nr), true
	case off == 4:
		return d.Arch, true
	case off == 8:
		return uint32(d.InstructionPointer), true
	case off == 12:
		return uint32(d.InstructionPointer >> 32), true
	case off >= 16 && off < 64 && off%4 == 0:
		a := d.Args[(off-16)/8]
		if (off-16)%8 == 4 {
			return uint32(a >> 32), true
		}
		return uint32(a), true
	}
	return 0, false
}

var errBadProgram = errors.New("seccomp: program is not a valid seccomp filter")

// Run evaluates a seccomp filter on d exactly as the kernel would and returns
// the SECCOMP_RET_* value. It exists so that tests and Explain judge the
// generated program, not the profile it came from. It implements the
// instruction subset seccomp_check_filter() accepts and fails on anything
// else, an out-of-bounds jump, or a path that does not end in a return.
func Run(ins []unix.SockFilter, d Data) (uint32, error) {
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(ins); pc++ {
		in := ins[pc]
		k := in.K
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			v, ok := d.load32(k)
			if !ok {
				return 0, fmt.Errorf("%w: load of offset %d at %d", errBadProgram, k, pc)
			}
			a = v
		case unix.BPF_LD | unix.BPF_W | unix.BPF_LEN:
			a = 64
		case unix.BPF_LDX | unix.BPF_W | unix.BPF_LEN:
			x = 64
		case unix.BPF_LD | unix.BPF_IMM:
			a = k
		case unix.BPF_LDX | unix.BPF_IMM:
			x = k
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_MISC | unix.BPF_TXA:
			a = x
		case unix.BPF_LD | unix.BPF_MEM, unix.BPF_LDX | unix.BPF_MEM, unix.BPF_ST, unix.BPF_STX:
			if k >= 16 {
				return 0, fmt.Errorf("%w: scratch slot %d at %d", errBadProgram, k, pc)
			}
			switch in.Code {
			case unix.BPF_LD | unix.BPF_MEM:
				a = mem[k]
			case unix.BPF_LDX | unix.BPF_MEM:
				x = mem[k]
			case unix.BPF_ST:
				mem[k] = a
			default:
				mem[k] = x
			}
		case unix.BPF_RET | unix.BPF_K:
			return k, nil
		case unix.BPF_RET | unix.BPF_A:
			return a, nil
		case unix.BPF_JMP | unix.BPF_JA:
			if uint64(pc)+1+uint64(k) >= uint64(len(ins)) {
				return 0, fmt.Errorf("%w: jump out of range at %d", errBadProgram, pc)
			}
			pc += int(k)
		default:
			switch in.Code & 0x07 {
			case unix.BPF_ALU:
				op := in.Code & 0xf0
				src := k
				if in.Code&unix.BPF_X != 0 {
					src = x
				}
				switch op {
				case unix.BPF_ADD:
					a += src
				case unix.BPF_SUB:
					a -= src
				case unix.BPF_MUL:
					a *= src
				case unix.BPF_DIV:
					if src == 0 {
						return 0, nil // the kernel's classic BPF returns 0 (KILL) on division by zero
					}
					a /= src
				case unix.BPF_MOD:
					if src == 0 {
						return 0, nil
					}
					a %= src
				case unix.BPF_OR:
					a |= src
				case unix.BPF_AND:
					a &= src
				case unix.BPF_XOR:
					a ^= src
				case unix.BPF_LSH:
					a <<= src
				case unix.BPF_RSH:
					a >>= src
				case unix.BPF_NEG:
					a = -a
				default:
					return 0, fmt.Errorf("%w: opcode %#x at %d", errBadProgram, in.Code, pc)
				}
			case unix.BPF_JMP:
				src := k
				if in.Code&unix.BPF_X != 0 {
					src = x
				}
				var cond bool
				switch in.Code & 0xf0 {
				case unix.BPF_JEQ:
					cond = a == src
				case unix.BPF_JGT:
					cond = a > src
				case unix.BPF_JGE:
					cond = a >= src
				case unix.BPF_JSET:
					cond = a&src != 0
				default:
					return 0, fmt.Errorf("%w: opcode %#x at %d", errBadProgram, in.Code, pc)
				}
				off := int(in.Jf)
				if cond {
					off = int(in.Jt)
				}
				if pc+1+off >= len(ins) {
					return 0, fmt.Errorf("%w: jump out of range at %d", errBadProgram, pc)
				}
				pc += off
			default:
				return 0, fmt.Errorf("%w: opcode %#x at %d", errBadProgram, in.Code, pc)
			}
		}
	}
	return 0, fmt.Errorf("%w: fell off the end", errBadProgram)
}

// ActionString renders a SECCOMP_RET_* value the way profiles name it.
func ActionString(ret uint32) string {
	data := ret & unix.SECCOMP_RET_DATA
	switch ret & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_KILL_PROCESS:
		return "SCMP_ACT_KILL_PROCESS"
	case unix.SECCOMP_RET_KILL_THREAD:
		return "SCMP_ACT_KILL_THREAD"
	case unix.SECCOMP_RET_TRAP:
		return "SCMP_ACT_TRAP"
	case unix.SECCOMP_RET_ERRNO:
		return fmt.Sprintf("SCMP_ACT_ERRNO(%s)", errnoName(data))
	case unix.SECCOMP_RET_USER_NOTIF:
		return "SCMP_ACT_NOTIFY"
	case unix.SECCOMP_RET_TRACE:
		return fmt.Sprintf("SCMP_ACT_TRACE(%d)", data)
	case unix.SECCOMP_RET_LOG:
		return "SCMP_ACT_LOG"
	case unix.SECCOMP_RET_ALLOW:
		return "SCMP_ACT_ALLOW"
	}
	return fmt.Sprintf("SECCOMP_RET(%#x)", ret)
}

func errnoName(n uint32) string {
	if name := unix.ErrnoName(unix.Errno(n)); name != "" {
		return fmt.Sprintf("%d %s", n, name)
	}
	return fmt.Sprint(n)
}

// Disassemble renders a program one instruction per line, for humans.
func Disassemble(ins []unix.SockFilter) string {
	var b strings.Builder
	for i, in := range ins {
		fmt.Fprintf(&b, "%04d: code=%#04x jt=%d jf=%d k=%#08x\n", i, in.Code, in.Jt, in.Jf, in.K)
	}
	return b.String()
}
