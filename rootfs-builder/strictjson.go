package rootfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// strictDecode decodes data into v, refusing what encoding/json would
// silently accept: duplicate keys (the last one would win, so a reviewer
// could read one value while the builder uses another), keys that only match
// a field case-insensitively, unknown fields, non-UTF-8, excessive nesting
// and trailing bytes.
func strictDecode(data []byte, v any, maxDepth int) error {
	if !utf8.Valid(data) {
		return errors.New("not valid UTF-8")
	}
	if err := checkKeys(data, maxDepth); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON document")
	}
	return nil
}

// checkKeys walks the token stream once. Keys are limited to [a-z0-9_]:
// encoding/json folds case (and even maps U+212A KELVIN SIGN to "k"), so an
// exact-lowercase alphabet is what makes "unknown field" mean unknown.
func checkKeys(data []byte, maxDepth int) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		object    bool
		expectKey bool
		keys      map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) != 0 {
				return errors.New("unexpected end of JSON")
			}
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			key, ok := tok.(string)
			if !ok {
				return errors.New("object key is not a string")
			}
			if !validKey(key) {
				return fmt.Errorf("field %q: keys are lowercase ASCII [a-z0-9_]", key)
			}
			if top.keys[key] {
				return fmt.Errorf("duplicate key %q", key)
			}
			top.keys[key] = true
			top.expectKey = false
			continue
		}
		if top != nil && top.object {
			top.expectKey = true // this token is the value
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, expectKey: true, keys: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			// The array was a value of its parent; the parent already
			// advanced when the array opened.
		}
		if len(stack) > maxDepth {
			return fmt.Errorf("JSON nested deeper than %d", maxDepth)
		}
		if len(stack) == 0 && top == nil {
			// A complete top-level value; anything more is trailing data.
			if _, err := dec.Token(); err != io.EOF {
				return errors.New("trailing data after the JSON document")
			}
			return nil
		}
	}
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
