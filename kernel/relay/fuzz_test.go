package relay

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// FuzzAdmit: admission decides or refuses with a catalogue Refusal, never
// panics, and admits only POSTs to an exact route with an allowed model.
func FuzzAdmit(f *testing.F) {
	f.Add("POST", "/v1/responses", "application/json", []byte(`{"model":"gpt-5.5","input":"hi","stream":true,"max_output_tokens":100}`))
	f.Add("POST", "/v1/messages?beta=true", "application/json", []byte(`{"model":"claude-x","max_tokens":32000,"messages":[]}`))
	f.Add("POST", "/v1/%2e%2e/v1/responses", "application/json", []byte(`{"model":"gpt-5.5"}`))
	f.Add("GET", "/v1/responses", "", []byte(nil))
	f.Add("POST", "/v1/responses", "application/json", []byte(`{"model":"gpt-5.5","model":"other"}`))
	ru := &rules{routes: map[string]bool{"/v1/responses": true, "/v1/messages": true},
		models: map[string]bool{"gpt-5.5": true, "claude-x": true}, maxBody: 4096, maxQuery: 1024}
	f.Fuzz(func(t *testing.T, method, uri, ctype string, body []byte) {
		h := http.Header{}
		h.Set("Content-Type", ctype)
		c, err := admit(ru, method, uri, h, body)
		if err != nil {
			var rf *Refusal
			if !asRefusal(err, &rf) || !protocol.Known(rf.Code) || rf.Status < 400 || rf.Status > 599 {
				t.Fatalf("not a catalogue refusal: %v", err)
			}
			if strings.Contains(rf.Reason, string(body)) && len(body) > 8 {
				t.Fatalf("refusal echoes the body: %q", rf.Reason)
			}
			return
		}
		if method != http.MethodPost || !ru.routes[c.route] || !ru.models[c.model] || !strings.HasPrefix(uri, c.route) ||
			strings.ContainsAny(c.route, "%") || len(body) > ru.maxBody || !utf8.Valid(body) || c.maxOutput < 0 {
			t.Fatalf("admitted %q %q -> %+v", method, uri, c)
		}
	})
}

func asRefusal(err error, rf **Refusal) bool {
	r, ok := err.(*Refusal)
	*rf = r
	return ok
}

// TestAdmitReadsKeysAsDecoded: admission reads a member by its decoded key,
// as the provider will, so an escaped "model" is the model checked.
func TestAdmitReadsKeysAsDecoded(t *testing.T) {
	ru := &rules{routes: map[string]bool{"/v1/responses": true}, models: map[string]bool{"gpt-5.5": true}, maxBody: 4096, maxQuery: 1024}
	h := http.Header{"Content-Type": {"application/json"}}
	c, err := admit(ru, "POST", "/v1/responses", h, []byte(`{"mod\u0065l":"gpt-5.5","input":[{"a":{"b":1}}],"max_t\u006fkens":7}`))
	if err != nil || c.model != "gpt-5.5" || c.maxOutput != 7 {
		t.Fatalf("escaped keys: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		body string
		code protocol.Code
	}{
		{`{"mod\u0065l":"other"}`, protocol.CodeModelRefused},
		{`{"model":"gpt-5.5","mod\u0065l":"other"}`, protocol.CodeDuplicateKey},
		{`{"model":"gpt-5.5","input":[{"a":{"secret":1,"\u0073ecret":2}}]}`, protocol.CodeDuplicateKey},
	} {
		_, err := admit(ru, "POST", "/v1/responses", h, []byte(tc.body))
		var rf *Refusal
		if !asRefusal(err, &rf) || rf.Code != tc.code || strings.Contains(rf.Reason, "secret") {
			t.Fatalf("%s: %v", tc.body, err)
		}
	}
}
