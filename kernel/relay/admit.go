package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// rules is what admission checks a request against.
type rules struct {
	routes   map[string]bool // raw paths, exact
	models   map[string]bool // policy ∩ provider
	maxBody  int
	maxQuery int
}

// call is an admitted request: what the relay forwards and reserves for.
type call struct {
	route     string
	rawQuery  string
	model     string
	stream    bool
	maxOutput int64 // the request's own output cap, 0 if none
}

// Refusal is an admission refusal: a catalogue code and the HTTP status it
// is answered with. Its text names the rule, never request content.
type Refusal struct {
	Code   protocol.Code
	Status int
	Reason string
}

func (r *Refusal) Error() string { return string(r.Code) + ": " + r.Reason }

// Unwrap lets errors.Is match the catalogue error.
func (r *Refusal) Unwrap() error { return protocol.E(r.Code) }

func refuse(code protocol.Code, status int, reason string) error {
	return &Refusal{Code: code, Status: status, Reason: reason}
}

// admit decides whether a request may leave. requestURI is the request
// line's target exactly as the worker sent it: the path is compared byte
// for byte, before any decoding, so "%2e%2e", "%2f", "%252e", "/./" and
// "//" can never match a route.
func admit(ru *rules, method, requestURI string, header http.Header, body []byte) (call, error) {
	rawPath, rawQuery, err := checkRoute(ru, method, requestURI)
	if err != nil {
		return call{}, err
	}
	if ce := header.Values("Content-Encoding"); len(ce) > 0 && !(len(ce) == 1 && strings.EqualFold(ce[0], "identity")) {
		return call{}, refuse(protocol.CodeMalformedJSON, http.StatusUnsupportedMediaType, "encoded bodies are not forwarded")
	}
	if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err != nil || mt != "application/json" {
		return call{}, refuse(protocol.CodeMalformedJSON, http.StatusUnsupportedMediaType, "content type is not application/json")
	}
	if len(body) > ru.maxBody {
		return call{}, refuse(protocol.CodeFrameTooLarge, http.StatusRequestEntityTooLarge, "body exceeds the cap")
	}
	if !utf8.Valid(body) {
		return call{}, refuse(protocol.CodeNotUTF8, http.StatusBadRequest, "body is not UTF-8")
	}
	top, err := topLevel(body)
	if err != nil {
		return call{}, err
	}
	c := call{route: rawPath, rawQuery: rawQuery}
	if raw, ok := top["model"]; !ok || json.Unmarshal(raw, &c.model) != nil || !ru.models[c.model] {
		return call{}, refuse(protocol.CodeModelRefused, http.StatusForbidden, "model is not allowed")
	}
	if raw, ok := top["stream"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &c.stream) != nil {
			return call{}, refuse(protocol.CodeInvalidField, http.StatusBadRequest, "stream is not a boolean")
		}
	}
	// Whichever output cap the wire API names; the largest one given
	// bounds what the upstream may produce.
	for _, k := range []string{"max_output_tokens", "max_tokens", "max_completion_tokens"} {
		raw, ok := top[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 || n > 1<<40 {
			return call{}, refuse(protocol.CodeInvalidField, http.StatusBadRequest, k+" is not a positive integer")
		}
		c.maxOutput = max(c.maxOutput, n)
	}
	return c, nil
}

// checkRoute is admission's first step, taken before the body is read.
func checkRoute(ru *rules, method, requestURI string) (rawPath, rawQuery string, err error) {
	if method != http.MethodPost {
		return "", "", refuse(protocol.CodeRouteRefused, http.StatusMethodNotAllowed, "method is not POST")
	}
	rawPath, rawQuery, _ = strings.Cut(requestURI, "?")
	if !ru.routes[rawPath] {
		reason := "path is not an inference route"
		if strings.Contains(rawPath, "%") || strings.Contains(rawPath, "..") || strings.Contains(rawPath, "/./") || strings.Contains(rawPath, "//") {
			reason = "path is encoded or dotted"
		}
		return "", "", refuse(protocol.CodeRouteRefused, http.StatusNotFound, reason)
	}
	if len(rawQuery) > ru.maxQuery || strings.ContainsAny(rawQuery, "#\\ \t\r\n\x00") {
		return "", "", refuse(protocol.CodeRouteRefused, http.StatusBadRequest, "query string is too long or malformed")
	}
	return rawPath, rawQuery, nil
}

// topLevel splits a JSON object into its top-level members, refusing
// anything else and any repeated key: a parser upstream that kept the
// first "model" where we kept the last would otherwise smuggle a model
// past the policy.
func topLevel(body []byte) (map[string]json.RawMessage, error) {
	bad := func(code protocol.Code, reason string) error { return refuse(code, http.StatusBadRequest, reason) }
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return nil, bad(protocol.CodeMalformedJSON, "body is not a JSON object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, bad(protocol.CodeMalformedJSON, "body is not a JSON object")
		}
		if _, dup := out[key]; dup {
			return nil, bad(protocol.CodeDuplicateKey, "body repeats a top-level key")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, bad(protocol.CodeMalformedJSON, "body is not a JSON object")
		}
		out[key] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, bad(protocol.CodeMalformedJSON, "body is not a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bad(protocol.CodeTrailingData, "bytes follow the JSON object")
	}
	return out, nil
}
