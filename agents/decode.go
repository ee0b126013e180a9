package agent

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// maxDepth bounds nesting: a profile is an object of arrays of objects.
const maxDepth = 4

// Decode strictly decodes and validates one profile document, through the
// project's one strict-JSON reader (protocol.CheckShape for the shape:
// one object, no duplicate key at any depth, bounded nesting, nothing
// after it; protocol.DecodeStrict for keys that are exactly the format's
// field names, never case-folded).
func Decode(data []byte) (*Profile, error) {
	if len(data) > maxProfileSize {
		return nil, &FieldError{Reason: fmt.Sprintf("larger than %d bytes", maxProfileSize), Err: ErrSyntax}
	}
	if !utf8.Valid(data) {
		return nil, &FieldError{Reason: "not valid UTF-8", Err: ErrSyntax}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &FieldError{Reason: "empty document", Err: ErrSyntax}
	}
	if err := protocol.CheckShape(data, protocol.Limits{MaxDepth: maxDepth, MaxNodes: maxProfileSize}); err != nil {
		return nil, classify(err)
	}
	var p Profile
	if err := protocol.DecodeStrict(data, &p); err != nil {
		return nil, classify(err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// classify maps the reader's catalogue codes onto this package's closed
// set; the reason keeps the reader's local cause, which names the key.
func classify(err error) error {
	switch protocol.AsWire(err).Code {
	case protocol.CodeDuplicateKey:
		return &FieldError{Reason: "given twice in one object: " + err.Error(), Err: ErrDuplicateKey}
	case protocol.CodeUnknownField:
		return &FieldError{Reason: "keys are exact lower-case field names of the profile format: " + err.Error(), Err: ErrUnknownField}
	case protocol.CodeInvalidField:
		return &FieldError{Reason: err.Error(), Err: ErrInvalid}
	case protocol.CodeTooDeep:
		return &FieldError{Reason: fmt.Sprintf("nested deeper than %d", maxDepth), Err: ErrSyntax}
	case protocol.CodeTrailingData:
		return &FieldError{Reason: "trailing data after the JSON document", Err: ErrSyntax}
	}
	if bytes.HasPrefix([]byte(err.Error()), []byte(protocol.E(protocol.CodeMalformedJSON).Error())) && strings.Contains(err.Error(), "top level is not an object") {
		return &FieldError{Reason: "a profile is a JSON object", Err: ErrSyntax}
	}
	return &FieldError{Reason: err.Error(), Err: ErrSyntax}
}
