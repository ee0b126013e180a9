package relay

import (
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/tidwall/gjson"
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
	Model  string // the model asked for, once admission has read it
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
	top, err := topLevel(body, append([]string{"model", "stream"}, outputCaps...)...)
	if err != nil {
		return call{}, err
	}
	c := call{route: rawPath, rawQuery: rawQuery}
	if raw, ok := top["model"]; !ok || json.Unmarshal(raw, &c.model) != nil || !ru.models[c.model] {
		return call{}, &Refusal{Code: protocol.CodeModelRefused, Status: http.StatusForbidden, Reason: "model is not allowed", Model: c.model}
	}
	if raw, ok := top["stream"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &c.stream) != nil {
			return call{}, &Refusal{Code: protocol.CodeInvalidField, Status: http.StatusBadRequest, Reason: "stream is not a boolean", Model: c.model}
		}
	}
	// Whichever output cap the wire API names; the largest one given
	// bounds what the upstream may produce.
	for _, k := range outputCaps {
		raw, ok := top[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 || n > 1<<40 {
			return call{}, &Refusal{Code: protocol.CodeInvalidField, Status: http.StatusBadRequest, Reason: k + " is not a positive integer", Model: c.model}
		}
		c.maxOutput = max(c.maxOutput, n)
	}
	return c, nil
}

// outputCaps are the output-token caps of the three wire APIs.
var outputCaps = []string{"max_output_tokens", "max_tokens", "max_completion_tokens"}

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

// maxDepth bounds a body's nesting (tool schemas nest; nothing an agent
// sends comes near), so the checker's stack stays small whatever the body.
const maxDepth = 512

// topLevel checks the body with the project's one strict-JSON reader and
// returns the named top-level members that are present. A key repeated at
// any depth is refused: a parser upstream that kept the first "model"
// where we kept the last would smuggle a model past the policy, and a
// repeated key inside a tool call or message lets the provider read a
// different request from the one recorded. The refusal never quotes the
// body (the reader's path is content).
func topLevel(body []byte, keys ...string) (map[string]json.RawMessage, error) {
	bad := func(code protocol.Code, reason string) error { return refuse(code, http.StatusBadRequest, reason) }
	if err := protocol.CheckShape(body, protocol.Limits{MaxDepth: maxDepth, MaxNodes: len(body) + 1}); err != nil {
		switch code := protocol.AsWire(err).Code; code {
		case protocol.CodeDuplicateKey:
			return nil, bad(code, "body repeats a key")
		case protocol.CodeTrailingData:
			return nil, bad(code, "bytes follow the JSON object")
		case protocol.CodeTooDeep:
			return nil, bad(code, "body nests too deep")
		}
		return nil, bad(protocol.CodeMalformedJSON, "body is not a JSON object")
	}
	// The body is one well-formed object without a repeated key, so the
	// members gjson walks are exactly those encoding/json would decode.
	// One walk, skipping the values not asked for (a 16 MiB body is
	// mostly one "messages" or "input" value).
	out := map[string]json.RawMessage{}
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		if slices.Contains(keys, k.Str) {
			out[k.Str] = json.RawMessage(v.Raw)
		}
		return true
	})
	return out, nil
}
