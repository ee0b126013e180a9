package agent

import "errors"

// The closed set of errors; every error this package returns wraps one.
var (
	// ErrSyntax: the document is not one well-formed JSON object.
	ErrSyntax = errors.New("agent profile: malformed JSON")
	// ErrUnknownField: a key the format does not define (matched exactly,
	// never case-folded).
	ErrUnknownField = errors.New("agent profile: unknown field")
	// ErrDuplicateKey: a key given twice in one object.
	ErrDuplicateKey = errors.New("agent profile: duplicate key")
	// ErrInvalid: a field has a bad type or value, or a required one is missing.
	ErrInvalid = errors.New("agent profile: invalid value")
	// ErrUnknownAgent: no shipped profile has that name.
	ErrUnknownAgent = errors.New("agent: no such profile")
	// ErrTask: the task (or a model override) cannot be rendered.
	ErrTask = errors.New("agent: invalid task")
)

// FieldError names the field a decode or validation error is about.
type FieldError struct {
	Field  string
	Reason string
	Err    error // one of the sentinels above
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Err.Error() + ": " + e.Reason
	}
	return e.Err.Error() + ": " + e.Field + ": " + e.Reason
}

func (e *FieldError) Unwrap() error { return e.Err }
