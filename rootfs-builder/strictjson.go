package rootfs

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// strictDecode decodes data into v through the project's one strict-JSON
// reader, refusing what encoding/json would silently accept: duplicate keys
// (the last one would win, so a reviewer could read one value while the
// builder uses another), keys that only match a field case-insensitively,
// unknown fields, non-UTF-8, excessive nesting and trailing bytes.
func strictDecode(data []byte, v any, maxDepth int) error {
	if !utf8.Valid(data) {
		return errors.New("not valid UTF-8")
	}
	if err := protocol.CheckShape(data, protocol.Limits{MaxDepth: maxDepth, MaxNodes: len(data) + 1}); err != nil {
		return jsonError(err, maxDepth)
	}
	if err := protocol.DecodeStrict(data, v); err != nil {
		return jsonError(err, maxDepth)
	}
	return nil
}

// jsonError words the reader's catalogue error for a spec's author, naming
// the key its local cause quotes.
func jsonError(err error, maxDepth int) error {
	msg := err.Error()
	quoted := msg[strings.LastIndex(msg, ": ")+2:]
	switch protocol.AsWire(err).Code {
	case protocol.CodeDuplicateKey:
		return fmt.Errorf("duplicate key %s", quoted)
	case protocol.CodeUnknownField:
		return fmt.Errorf("unknown field %s (keys are lowercase ASCII [a-z0-9_], exactly a field's name)", quoted)
	case protocol.CodeTooDeep:
		return fmt.Errorf("JSON nested deeper than %d", maxDepth)
	case protocol.CodeTrailingData:
		return errors.New("trailing data after the JSON document")
	}
	if strings.HasSuffix(msg, "top level is not an object") {
		return errors.New("cannot unmarshal: the document is not a JSON object")
	}
	return err
}
