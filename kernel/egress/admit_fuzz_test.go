package egress

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// FuzzAdmit: whatever request bytes a domain sends, admission never
// panics, and what it admits is a read of an allowlisted host: GET or HEAD
// to http://host:80 with no body and a clean path, or CONNECT host:443.
// Seeds in testdata/fuzz/FuzzAdmit.
func FuzzAdmit(f *testing.F) {
	for _, s := range []string{
		"GET http://proxy.golang.org/github.com/google/uuid/@v/v1.6.0.zip HTTP/1.1\r\nHost: proxy.golang.org\r\n\r\n",
		"HEAD http://registry.npmjs.org/is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\n\r\n",
		"CONNECT proxy.golang.org:443 HTTP/1.1\r\nHost: proxy.golang.org:443\r\n\r\n",
		"POST http://registry.npmjs.org/x HTTP/1.1\r\nHost: registry.npmjs.org\r\nContent-Length: 2\r\n\r\n{}",
		"GET http://PROXY.golang.org:80/a/%2e%2e/b?x=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	allow := map[string]bool{"proxy.golang.org": true, "registry.npmjs.org": true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		q, ref := admit(r, allow)
		if ref != nil {
			if !protocol.Known(ref.code) || ref.status != http.StatusForbidden || ref.reason == "" {
				t.Fatalf("refusal %+v", ref)
			}
			return
		}
		if !allow[q.host] || r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			t.Fatalf("admitted %+v for %q", q, raw)
		}
		switch q.method {
		case http.MethodConnect:
			if !q.tunnel || !strings.HasSuffix(r.Host, ":443") || q.path != "" {
				t.Fatalf("tunnel %+v for %q", q, raw)
			}
		case http.MethodGet, http.MethodHead:
			if q.tunnel || r.URL.Scheme != "http" || (r.URL.Port() != "" && r.URL.Port() != "80") || !cleanPath(r.URL.Path, q.path) ||
				strings.Contains("/"+q.path+"/", "/../") {
				t.Fatalf("fetch %+v for %q", q, raw)
			}
		default:
			t.Fatalf("admitted method %q", q.method)
		}
	})
}
