package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/autonomic-kernel/autonomic/protocol"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// MaxProfileSize bounds the JSON document Parse accepts. Docker's default
// profile is about 20 KiB; a megabyte is generous and keeps a hostile
// document from costing more than that.
const MaxProfileSize = 1 << 20

// Sentinel errors; every parse error wraps exactly one, inside a *ParseError
// that names where it happened.
var (
	ErrSyntax         = errors.New("malformed JSON")
	ErrTooLarge       = errors.New("profile too large")
	ErrDuplicateKey   = errors.New("duplicate key")
	ErrUnknownField   = errors.New("unknown field")
	ErrMissingField   = errors.New("missing field")
	ErrType           = errors.New("wrong JSON type")
	ErrUnknownSyscall = errors.New("unknown syscall name")
	ErrUnknownAction  = errors.New("unknown action")
	ErrUnknownOp      = errors.New("unknown operator")
	ErrUnknownArch    = errors.New("unknown architecture")
	ErrUnknownFlag    = errors.New("unknown or refused flag")
	ErrUnknownCap     = errors.New("unknown capability")
	ErrArgIndex       = errors.New("argument index out of range")
	ErrDuplicate      = errors.New("duplicate entry")
	ErrInvalid        = errors.New("invalid value")
)

// ParseError locates a profile error: Rule is the index in syscalls (-1 for
// the top level) and Names the rule's syscall names when they are known.
type ParseError struct {
	Rule  int
	Names []string
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString("seccomp profile: ")
	if e.Rule >= 0 {
		fmt.Fprintf(&b, "syscalls[%d]", e.Rule)
		if len(e.Names) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(e.Names, ", "))
		}
		if e.Field != "" {
			b.WriteString(": ")
		}
	}
	b.WriteString(e.Field)
	if e.Field != "" || e.Rule >= 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

// Parse decodes a profile strictly: unknown or duplicate keys (compared
// exactly, not case-insensitively as encoding/json would), unknown syscall
// names, actions, operators, architectures, flags or capabilities, an
// argument index outside 0..5, two comparisons of one argument in a rule,
// and trailing data are all errors. Nothing is ever silently dropped.
func Parse(data []byte) (Profile, error) {
	top := func(field string, err error) error { return &ParseError{Rule: -1, Field: field, Err: err} }
	if len(data) > MaxProfileSize {
		return Profile{}, top("", fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxProfileSize))
	}
	if err := checkShape(data); err != nil {
		return Profile{}, err
	}
	obj, err := decodeObject(data)
	if err != nil {
		return Profile{}, top("", err)
	}
	if err := onlyKeys(obj, "defaultAction", "defaultErrnoRet", "architectures", "archMap", "flags", "syscalls"); err != nil {
		return Profile{}, top("", err)
	}
	var p Profile
	raw, ok := obj["defaultAction"]
	if !ok || isNull(raw) {
		return Profile{}, top("defaultAction", ErrMissingField)
	}
	if p.DefaultAction, err = decodeAction(raw); err != nil {
		return Profile{}, top("defaultAction", err)
	}
	if p.DefaultErrnoRet, err = decodeErrno(obj["defaultErrnoRet"], p.DefaultAction); err != nil {
		return Profile{}, top("defaultErrnoRet", err)
	}
	if p.Architectures, err = decodeArches(obj["architectures"]); err != nil {
		return Profile{}, top("architectures", err)
	}
	if p.ArchMap, err = decodeArchMap(obj["archMap"]); err != nil {
		return Profile{}, top("archMap", err)
	}
	if len(p.Architectures) > 0 && len(p.ArchMap) > 0 {
		return Profile{}, top("archMap", fmt.Errorf("%w: give architectures or archMap, not both", ErrInvalid))
	}
	if p.Flags, err = decodeFlags(obj["flags"]); err != nil {
		return Profile{}, top("flags", err)
	}
	rules, err := decodeArray(obj["syscalls"])
	if err != nil {
		return Profile{}, top("syscalls", err)
	}
	for i, r := range rules {
		rule, err := decodeRule(r)
		if err != nil {
			var pe *ParseError
			if errors.As(err, &pe) {
				pe.Rule = i
				return Profile{}, pe
			}
			return Profile{}, &ParseError{Rule: i, Err: err}
		}
		p.Syscalls = append(p.Syscalls, rule)
	}
	return p, nil
}

func decodeRule(raw json.RawMessage) (Rule, error) {
	var r Rule
	fail := func(field string, err error) error { return &ParseError{Names: r.Names, Field: field, Err: err} }
	obj, err := decodeObject(raw)
	if err != nil {
		return r, fail("", err)
	}
	// Names come first so that every later error can name the rule.
	names, hasNames := obj["names"]
	name, hasName := obj["name"]
	hasNames = hasNames && !isNull(names)
	hasName = hasName && !isNull(name)
	switch {
	case hasNames && hasName:
		return r, fail("name", fmt.Errorf("%w: give names or the deprecated name, not both", ErrInvalid))
	case hasName:
		var s string
		if s, err = decodeString(name); err != nil {
			return r, fail("name", err)
		}
		r.Names = []string{s}
	case hasNames:
		if r.Names, err = decodeStrings(names); err != nil {
			return r, fail("names", err)
		}
	}
	if err := onlyKeys(obj, "names", "name", "action", "errnoRet", "args", "comment", "includes", "excludes"); err != nil {
		return r, fail("", err)
	}
	if len(r.Names) == 0 {
		return r, fail("names", fmt.Errorf("%w: a rule needs at least one syscall name", ErrMissingField))
	}
	seen := map[string]bool{}
	for _, n := range r.Names {
		if seen[n] {
			return r, fail("names", fmt.Errorf("%w: %q listed twice", ErrDuplicate, n))
		}
		seen[n] = true
		if !knownSyscall(n) {
			return r, fail("names", fmt.Errorf("%w: %q", ErrUnknownSyscall, n))
		}
	}
	act, ok := obj["action"]
	if !ok || isNull(act) {
		return r, fail("action", ErrMissingField)
	}
	if r.Action, err = decodeAction(act); err != nil {
		return r, fail("action", err)
	}
	if r.ErrnoRet, err = decodeErrno(obj["errnoRet"], r.Action); err != nil {
		return r, fail("errnoRet", err)
	}
	if c, ok := obj["comment"]; ok && !isNull(c) {
		if r.Comment, err = decodeString(c); err != nil {
			return r, fail("comment", err)
		}
	}
	args, err := decodeArray(obj["args"])
	if err != nil {
		return r, fail("args", err)
	}
	used := map[uint]int{}
	for j, a := range args {
		arg, err := decodeArg(a)
		field := fmt.Sprintf("args[%d]", j)
		if err != nil {
			return r, fail(field, err)
		}
		if k, dup := used[arg.Index]; dup {
			// libseccomp cannot AND two comparisons of one argument, and
			// runc quietly turns them into an OR; refuse rather than guess.
			return r, fail(field, fmt.Errorf("%w: argument %d is already compared by args[%d]; write two rules", ErrDuplicate, arg.Index, k))
		}
		used[arg.Index] = j
		r.Args = append(r.Args, arg)
	}
	if r.Includes, err = decodeFilter(obj["includes"]); err != nil {
		return r, fail("includes", err)
	}
	if r.Excludes, err = decodeFilter(obj["excludes"]); err != nil {
		return r, fail("excludes", err)
	}
	return r, nil
}

func decodeArg(raw json.RawMessage) (Arg, error) {
	var a Arg
	obj, err := decodeObject(raw)
	if err != nil {
		return a, err
	}
	if err := onlyKeys(obj, "index", "value", "valueTwo", "op"); err != nil {
		return a, err
	}
	idx, ok := obj["index"]
	if !ok || isNull(idx) {
		return a, fmt.Errorf("index: %w", ErrMissingField)
	}
	i, err := decodeUint(idx)
	if err != nil {
		return a, fmt.Errorf("index: %w", err)
	}
	if i > 5 {
		return a, fmt.Errorf("index: %w: %d (a syscall has arguments 0..5)", ErrArgIndex, i)
	}
	a.Index = uint(i)
	v, ok := obj["value"]
	if !ok || isNull(v) {
		return a, fmt.Errorf("value: %w", ErrMissingField)
	}
	if a.Value, err = decodeUint(v); err != nil {
		return a, fmt.Errorf("value: %w", err)
	}
	if v2, ok := obj["valueTwo"]; ok && !isNull(v2) {
		if a.ValueTwo, err = decodeUint(v2); err != nil {
			return a, fmt.Errorf("valueTwo: %w", err)
		}
	}
	op, ok := obj["op"]
	if !ok || isNull(op) {
		return a, fmt.Errorf("op: %w", ErrMissingField)
	}
	s, err := decodeString(op)
	if err != nil {
		return a, fmt.Errorf("op: %w", err)
	}
	a.Op = Op(s)
	if !validOp(a.Op) {
		return a, fmt.Errorf("op: %w: %q", ErrUnknownOp, s)
	}
	if a.Op == OpMaskedEqual && a.ValueTwo&^a.Value != 0 {
		// (arg & mask) == datum can never hold when the datum has bits
		// outside the mask: the rule would be dead code.
		return a, fmt.Errorf("%w: SCMP_CMP_MASKED_EQ datum %#x has bits outside mask %#x, so it never matches", ErrInvalid, a.ValueTwo, a.Value)
	}
	return a, nil
}

func decodeFilter(raw json.RawMessage) (Filter, error) {
	var f Filter
	if raw == nil || isNull(raw) {
		return f, nil
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return f, err
	}
	if err := onlyKeys(obj, "arches", "caps", "minKernel"); err != nil {
		return f, err
	}
	if f.Arches, err = decodeStrings(obj["arches"]); err != nil {
		return f, fmt.Errorf("arches: %w", err)
	}
	for _, a := range f.Arches {
		if !validFilterArch(a) {
			return f, fmt.Errorf("arches: %w: %q", ErrUnknownArch, a)
		}
	}
	if f.Caps, err = decodeStrings(obj["caps"]); err != nil {
		return f, fmt.Errorf("caps: %w", err)
	}
	for _, c := range f.Caps {
		if !validCap(c) {
			return f, fmt.Errorf("caps: %w: %q", ErrUnknownCap, c)
		}
	}
	if mk, ok := obj["minKernel"]; ok && !isNull(mk) {
		s, err := decodeString(mk)
		if err != nil {
			return f, fmt.Errorf("minKernel: %w", err)
		}
		if s != "" { // moby treats "" as absent
			if f.MinKernel, err = ParseKernelVersion(s, false); err != nil {
				return f, fmt.Errorf("minKernel: %w: %w", ErrInvalid, err)
			}
		}
	}
	return f, nil
}

func decodeAction(raw json.RawMessage) (Action, error) {
	s, err := decodeString(raw)
	if err != nil {
		return "", err
	}
	if !validAction(Action(s)) {
		return "", fmt.Errorf("%w: %q", ErrUnknownAction, s)
	}
	return Action(s), nil
}

// decodeErrno reads errnoRet. It is meaningful only for ERRNO and TRACE
// (runc refuses it elsewhere, and so do we); absent, it is EPERM.
func decodeErrno(raw json.RawMessage, act Action) (uint16, error) {
	if raw == nil || isNull(raw) {
		if act == ActErrno || act == ActTrace {
			return 1, nil // EPERM
		}
		return 0, nil
	}
	if act != ActErrno && act != ActTrace {
		return 0, fmt.Errorf("%w: only SCMP_ACT_ERRNO and SCMP_ACT_TRACE take an errno, not %s", ErrInvalid, act)
	}
	n, err := decodeUint(raw)
	if err != nil {
		return 0, err
	}
	if n > 4095 { // MAX_ERRNO; libseccomp's return code is an int16
		return 0, fmt.Errorf("%w: errno %d exceeds 4095", ErrInvalid, n)
	}
	return uint16(n), nil
}

func decodeArches(raw json.RawMessage) ([]Arch, error) {
	ss, err := decodeStrings(raw)
	if err != nil {
		return nil, err
	}
	var out []Arch
	seen := map[string]bool{}
	for _, s := range ss {
		if _, ok := archToken(Arch(s)); !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownArch, s)
		}
		if seen[s] {
			return nil, fmt.Errorf("%w: %q listed twice", ErrDuplicate, s)
		}
		seen[s] = true
		out = append(out, Arch(s))
	}
	return out, nil
}

func decodeArchMap(raw json.RawMessage) ([]ArchMapEntry, error) {
	items, err := decodeArray(raw)
	if err != nil {
		return nil, err
	}
	var out []ArchMapEntry
	for i, it := range items {
		obj, err := decodeObject(it)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		if err := onlyKeys(obj, "architecture", "subArchitectures"); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		a, ok := obj["architecture"]
		if !ok || isNull(a) {
			return nil, fmt.Errorf("[%d].architecture: %w", i, ErrMissingField)
		}
		arches, err := decodeArches(json.RawMessage("[" + string(a) + "]"))
		if err != nil {
			return nil, fmt.Errorf("[%d].architecture: %w", i, err)
		}
		sub, err := decodeArches(obj["subArchitectures"])
		if err != nil {
			return nil, fmt.Errorf("[%d].subArchitectures: %w", i, err)
		}
		out = append(out, ArchMapEntry{Arch: arches[0], SubArches: sub})
	}
	return out, nil
}

func decodeFlags(raw json.RawMessage) ([]string, error) {
	ss, err := decodeStrings(raw)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, s := range ss {
		if _, ok := flagBit(s); !ok {
			if s == "SECCOMP_FILTER_FLAG_SPEC_ALLOW" {
				return nil, fmt.Errorf("%w: %q (speculative-execution mitigations stay on)", ErrUnknownFlag, s)
			}
			return nil, fmt.Errorf("%w: %q", ErrUnknownFlag, s)
		}
		if seen[s] {
			return nil, fmt.Errorf("%w: %q listed twice", ErrDuplicate, s)
		}
		seen[s] = true
	}
	return ss, nil
}

// knownSyscall reports whether libseccomp knows name on any architecture;
// names that exist only elsewhere (socketcall on x86_64) resolve to
// libseccomp's negative pseudo-numbers and are valid.
func knownSyscall(name string) bool {
	if name == "" {
		return false
	}
	_, err := libseccomp.GetSyscallFromName(name)
	return err == nil
}

// maxDepth is the deepest a profile nests: the top level, syscalls, a
// rule, its args or includes, an argument or an arches list.
const maxDepth = 5

// checkShape runs the project's one strict-JSON reader over the whole
// profile once: well-formed, one object, no duplicate key at any depth, no
// nesting a profile cannot have, nothing after it. Its refusal names the
// path; one inside syscalls[i] is reported as that rule's error.
func checkShape(data []byte) error {
	err := protocol.CheckShape(data, protocol.Limits{MaxDepth: maxDepth, MaxNodes: len(data) + 1})
	if err == nil {
		return nil
	}
	var sentinel error
	switch protocol.AsWire(err).Code {
	case protocol.CodeDuplicateKey:
		sentinel = ErrDuplicateKey
	case protocol.CodeTooDeep:
		sentinel = ErrType
	case protocol.CodeTrailingData:
		return &ParseError{Rule: -1, Err: fmt.Errorf("%w: trailing data after the object", ErrSyntax)}
	default:
		sentinel = ErrSyntax
	}
	var se *protocol.ShapeError
	if !errors.As(err, &se) {
		// Only "top level is not an object" has no path.
		return &ParseError{Rule: -1, Err: fmt.Errorf("%w: want an object", ErrType)}
	}
	pe := &ParseError{Rule: -1}
	path := se.Path
	if len(path) >= 2 && path[0] == (protocol.PathStep{Key: "syscalls", Index: -1}) && path[1].Index >= 0 {
		pe.Rule, pe.Names = path[1].Index, looseNames(data, path[1].Index)
		path = path[2:]
	}
	switch {
	case sentinel == ErrDuplicateKey:
		key := path[len(path)-1].Key
		pe.Field, pe.Err = (&protocol.ShapeError{Path: path[:len(path)-1]}).String(), fmt.Errorf("%w: %q", ErrDuplicateKey, key)
	case sentinel == ErrType:
		pe.Field, pe.Err = (&protocol.ShapeError{Path: path}).String(), fmt.Errorf("%w: nested deeper than a profile can be", ErrType)
	default:
		pe.Field, pe.Err = (&protocol.ShapeError{Path: path}).String(), fmt.Errorf("%w: %s", ErrSyntax, se.Reason)
	}
	return pe
}

// looseNames reads rule i's syscall names leniently, so that an error the
// strict reader found in the rule can still name it; the rule is refused
// either way.
func looseNames(data []byte, i int) []string {
	var loose struct {
		Syscalls []struct {
			Names []string `json:"names"`
			Name  string   `json:"name"`
		} `json:"syscalls"`
	}
	if json.Unmarshal(data, &loose) != nil || i >= len(loose.Syscalls) {
		return nil
	}
	if r := loose.Syscalls[i]; len(r.Names) > 0 {
		return r.Names
	}
	if n := loose.Syscalls[i].Name; n != "" {
		return []string{n}
	}
	return nil
}

// decodeObject splits one object of an already checked profile into its
// members. Values stay raw so that each level is decoded with its own exact
// schema; keys are exact (a Go map, not struct fields).
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: want an object", ErrType)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return obj, nil
}

func onlyKeys(obj map[string]json.RawMessage, allowed ...string) error {
	for k := range obj {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownField, k)
		}
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func decodeArray(raw json.RawMessage) ([]json.RawMessage, error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '[' {
		return nil, fmt.Errorf("%w: want an array", ErrType)
	}
	var out []json.RawMessage
	if err := json.Unmarshal(t, &out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return out, nil
}

func decodeString(raw json.RawMessage) (string, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '"' {
		return "", fmt.Errorf("%w: want a string", ErrType)
	}
	var s string
	if err := json.Unmarshal(t, &s); err != nil {
		return "", fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return s, nil
}

func decodeStrings(raw json.RawMessage) ([]string, error) {
	items, err := decodeArray(raw)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, err := decodeString(it)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// decodeUint accepts a JSON integer in 0..2^64-1 written without fraction or
// exponent.
func decodeUint(raw json.RawMessage) (uint64, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] < '0' || t[0] > '9' {
		return 0, fmt.Errorf("%w: want a non-negative integer", ErrType)
	}
	var n uint64
	if err := json.Unmarshal(t, &n); err != nil {
		return 0, fmt.Errorf("%w: want an integer in 0..2^64-1, got %s", ErrType, t)
	}
	return n, nil
}
