package policy

import "github.com/autonomic-kernel/autonomic/protocol"

// Refusal is why a policy was refused. Refusals are constants, so callers
// test them with errors.Is and nothing can reassign them.
type Refusal string

func (r Refusal) Error() string { return "policy refused: " + string(r) }

const (
	ErrMalformed    Refusal = "malformed"     // not a well-formed, strictly shaped envelope or document
	ErrUnsigned     Refusal = "unsigned"      // no key id or no signature
	ErrUnknownKey   Refusal = "unknown_key"   // key id not in policy_keys
	ErrBadSignature Refusal = "bad_signature" // signature does not verify (tampered, wrong key)
	ErrInvalid      Refusal = "invalid"       // well-formed and signed, but its content is not acceptable
	ErrRollback     Refusal = "rollback"      // older version than the current policy
	ErrVersionReuse Refusal = "version_reuse" // same version, different content
	ErrOtherPolicy  Refusal = "other_policy"  // a different policy id
)

// Error is a refusal with its catalogue code (what crosses a boundary,
// through protocol.AsWire) and a local cause (for logs, never the wire).
type Error struct {
	Refusal Refusal
	wire    error
	cause   error
}

func (e *Error) Error() string {
	s := e.Refusal.Error()
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

func (e *Error) Unwrap() []error {
	out := []error{e.Refusal, e.wire}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

func refuse(r Refusal, wire, cause error) error {
	if wire == nil {
		wire = protocol.E(protocol.CodeInternal)
	}
	return &Error{Refusal: r, wire: wire, cause: cause}
}
