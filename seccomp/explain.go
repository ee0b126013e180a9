package seccomp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// maxWitnesses bounds the search for an input a rule decides; rules have at
// most six comparisons, so a handful of candidates per argument suffices.
const maxWitnesses = 4096

// checkLive proves, by running the generated program, that every selected
// rule decides at least one input it matches. libseccomp silently lets an
// unconditional rule swallow conditional ones for the same syscall (and
// refuses rules equal to the default); without this check such a rule would
// vanish from the program while still reading as policy in the profile.
func (c *compiled) checkLive() error {
	// Candidate values per syscall and argument, drawn from every rule for
	// that syscall, so that a search can step around the other rules.
	pools := map[string]*[6]map[uint64]bool{}
	for _, e := range c.entries {
		if pools[e.name] == nil {
			var p [6]map[uint64]bool
			for i := range p {
				p[i] = map[uint64]bool{0: true}
			}
			pools[e.name] = &p
		}
		for _, a := range c.profile.Syscalls[e.rule].Args {
			for _, v := range candidates(a) {
				pools[e.name][a.Index][v] = true
			}
		}
	}
	for _, e := range c.entries {
		if e.status != statusAdded && e.status != statusSameAsDefault {
			continue
		}
		r := c.profile.Syscalls[e.rule]
		got, ok, err := c.witness(e, r, pools[e.name])
		if err != nil {
			return err
		}
		if !ok {
			return &ParseError{Rule: e.rule, Names: r.Names, Err: fmt.Errorf(
				"%w: every %s call it matches gets %s from the compiled program instead of %s (another rule for %s takes precedence in libseccomp)",
				ErrShadowed, e.name, ActionString(got), ActionString(e.ret), e.name)}
		}
	}
	return nil
}

// witness searches for arguments that satisfy the rule and for which the
// program answers the rule's action. It returns the answer for the first
// satisfying input when none is decided by the rule.
func (c *compiled) witness(e entry, r Rule, all *[6]map[uint64]bool) (uint32, bool, error) {
	var pools [6][]uint64
	for i := range pools {
		pools[i] = sortedKeys(all[i])
	}
	for _, a := range r.Args {
		var sat []uint64
		for _, v := range pools[a.Index] {
			if a.matches(v) {
				sat = append(sat, v)
			}
		}
		if len(sat) == 0 {
			return 0, false, &ParseError{Rule: e.rule, Names: r.Names, Err: fmt.Errorf("%w: comparison %s on argument %d can never hold", ErrShadowed, a.Op, a.Index)}
		}
		pools[a.Index] = sat
	}
	var first uint32
	seen := false
	var idx [6]int
	for n := 0; n < maxWitnesses; n++ {
		d := Data{Nr: e.nr, Arch: c.auditArch}
		for i := range d.Args {
			d.Args[i] = pools[i][idx[i]]
		}
		got, err := Run(c.prog.Instructions, d)
		if err != nil {
			return 0, false, err
		}
		if got == e.ret {
			return got, true, nil
		}
		if !seen {
			first, seen = got, true
		}
		// Odometer over the candidate pools.
		i := 0
		for ; i < 6; i++ {
			idx[i]++
			if idx[i] < len(pools[i]) {
				break
			}
			idx[i] = 0
		}
		if i == 6 {
			break
		}
	}
	return first, false, nil
}

// sortedKeys keeps the search, and so the reported answer, deterministic.
func sortedKeys(m map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// candidates are values on both sides of a comparison's boundary.
func candidates(a Arg) []uint64 {
	v, w := a.Value, a.ValueTwo
	out := []uint64{v, v + 1, v - 1, 0, ^uint64(0)}
	if a.Op == OpMaskedEqual {
		out = append(out, w, w|^v, w^v, w|(^v&0xffffffff00000000))
	}
	return out
}

// Explanation says how a program answers one system call and why.
type Explanation struct {
	Syscall string
	Nr      int32
	Args    [6]uint64
	// Return is the SECCOMP_RET_* value the compiled program gives; Action
	// renders it.
	Return uint32
	Action string
	// Rule is the index of the deciding rule in the profile's syscalls, or
	// -1 when the answer is not a rule's (Reason says whose it is).
	Rule   int
	Reason string
	// Notes list other rules for this syscall and why they did not decide.
	Notes []string
	// ProgramSHA256 identifies the program the answer came from.
	ProgramSHA256 string
}

func (x Explanation) String() string {
	var b strings.Builder
	args := make([]string, len(x.Args))
	for i, a := range x.Args {
		args[i] = "0x" + strconv.FormatUint(a, 16)
	}
	fmt.Fprintf(&b, "%s (nr %d) args [%s]\n", x.Syscall, x.Nr, strings.Join(args, " "))
	fmt.Fprintf(&b, "answer: %s\n", x.Action)
	fmt.Fprintf(&b, "because: %s\n", x.Reason)
	for _, n := range x.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	fmt.Fprintf(&b, "program: sha256 %s\n", x.ProgramSHA256)
	return b.String()
}

// Explain compiles p and reports what the program answers for the native
// syscall named by syscall (a name, or a number for syscalls the library
// does not know) with the given arguments (missing ones are zero), and which
// rule of the profile decides. The answer comes from running the compiled
// program, so it is what the kernel will do, not what the profile seems to
// say.
func Explain(p Profile, syscall string, args []uint64, opts Options) (Explanation, error) {
	if len(args) > 6 {
		return Explanation{}, fmt.Errorf("seccomp: explain: a syscall has at most 6 arguments, got %d", len(args))
	}
	c, err := compile(p, opts)
	if err != nil {
		return Explanation{}, err
	}
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return Explanation{}, err
	}
	x := Explanation{Syscall: syscall, Rule: -1, ProgramSHA256: c.prog.SHA256}
	if n, err := strconv.ParseUint(syscall, 0, 31); err == nil {
		x.Nr = int32(n)
		if name, err := libseccomp.ScmpSyscall(n).GetNameByArch(native); err == nil {
			x.Syscall = name
		}
	} else {
		nr, err := libseccomp.GetSyscallFromNameByArch(syscall, native)
		if err != nil || nr < 0 {
			return Explanation{}, fmt.Errorf("seccomp: explain: %w: %q on %s", ErrUnknownSyscall, syscall, native)
		}
		x.Nr = int32(nr)
	}
	copy(x.Args[:], args)
	x.Return, err = Run(c.prog.Instructions, Data{Nr: x.Nr, Arch: c.auditArch, Args: x.Args})
	if err != nil {
		return Explanation{}, err
	}
	x.Action = ActionString(x.Return)

	if c.prog.ENOSYSAbove >= 0 && int(x.Nr) > c.prog.ENOSYSAbove {
		x.Reason = fmt.Sprintf("syscall %d is newer than every syscall the profile names (highest %d): ENOSYS so that libc falls back", x.Nr, c.prog.ENOSYSAbove)
		return x, nil
	}
	for _, e := range c.entries {
		if e.nr != x.Nr || e.status == statusNotNative {
			continue
		}
		r := p.Syscalls[e.rule]
		label := fmt.Sprintf("syscalls[%d] %s", e.rule, ActionString(e.ret))
		if e.status == statusNotSelected {
			x.Notes = append(x.Notes, label+" not selected: "+e.why)
			continue
		}
		match := true
		for _, a := range r.Args {
			if !a.matches(x.Args[a.Index]) {
				match = false
				x.Notes = append(x.Notes, fmt.Sprintf("%s does not match: arg%d %s", label, a.Index, describeArg(a)))
				break
			}
		}
		if !match {
			continue
		}
		if e.ret == x.Return && x.Rule < 0 {
			x.Rule = e.rule
			x.Reason = fmt.Sprintf("syscalls[%d] matches%s", e.rule, describeRule(r))
			continue
		}
		x.Notes = append(x.Notes, label+" also matches but does not decide")
	}
	if x.Rule < 0 {
		if x.Return == c.defaultRet {
			x.Reason = "no rule matches: the profile's default action"
		} else {
			x.Reason = "the program's answer matches no rule and is not the default (libseccomp precedence)"
		}
	}
	return x, nil
}

func describeRule(r Rule) string {
	if len(r.Args) == 0 {
		s := " (unconditional)"
		if r.Comment != "" {
			s += ": " + r.Comment
		}
		return s
	}
	parts := make([]string, len(r.Args))
	for i, a := range r.Args {
		parts[i] = fmt.Sprintf("arg%d %s", a.Index, describeArg(a))
	}
	s := " (" + strings.Join(parts, " && ") + ")"
	if r.Comment != "" {
		s += ": " + r.Comment
	}
	return s
}

func describeArg(a Arg) string {
	switch a.Op {
	case OpMaskedEqual:
		return fmt.Sprintf("& %#x == %#x", a.Value, a.ValueTwo)
	case OpNotEqual:
		return fmt.Sprintf("!= %#x", a.Value)
	case OpLessThan:
		return fmt.Sprintf("< %#x", a.Value)
	case OpLessEqual:
		return fmt.Sprintf("<= %#x", a.Value)
	case OpEqualTo:
		return fmt.Sprintf("== %#x", a.Value)
	case OpGreaterEqual:
		return fmt.Sprintf(">= %#x", a.Value)
	}
	return fmt.Sprintf("> %#x", a.Value)
}
