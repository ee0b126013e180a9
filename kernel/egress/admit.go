package egress

import (
	"net"
	"net/http"
	"strings"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// Bounds on what a request may name.
const (
	maxPath  = 4096
	maxQuery = 2048
)

// request is an admitted request: what the proxy will fetch or tunnel to.
type request struct {
	tunnel bool
	method string // GET, HEAD or CONNECT
	host   string // an allowlisted host name, lower case
	path   string // escaped path (as sent upstream), "" for a tunnel
	query  string // raw query, "" for a tunnel
	// goModule is the module version a Go mirror request fetches; its
	// success admits the version's checksum lookup (goRule).
	goModule string
}

// refusal is why a request is not forwarded: a catalogue code, the HTTP
// status the tool sees, and a reason it can print.
type refusal struct {
	code   protocol.Code
	status int
	reason string
}

func refuse(code protocol.Code, reason string) *refusal {
	return &refusal{code: code, status: http.StatusForbidden, reason: reason}
}

// admit decides whether r may leave, before anything is resolved, read or
// sent: GET or HEAD in absolute form (http://host/path) to an allowlisted
// host on port 80, or CONNECT to an allowlisted host on port 443; no
// body; no user info; a path with no dot segments or control bytes.
// Everything else is refused. allow maps lower-case host names.
func admit(r *http.Request, allow map[string]bool) (request, *refusal) {
	var q request
	// A body is refused whatever the method: a registry read never sends
	// one, and a body is how data would leave (or a package be published).
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return q, refuse(protocol.CodeForbidden, "request bodies are refused: the egress proxy only reads")
	}
	switch r.Method {
	case http.MethodConnect:
		host, port, err := net.SplitHostPort(r.Host)
		if err != nil || r.URL == nil || r.URL.Path != "" {
			return q, refuse(protocol.CodeInvalidField, "CONNECT needs host:443")
		}
		host = strings.ToLower(host)
		if port != "443" {
			return q, refuse(protocol.CodeForbidden, "CONNECT is allowed to port 443 only")
		}
		if !allowed(host, allow) {
			return q, refuse(protocol.CodeForbidden, "host "+printable(host)+" is not on the policy's egress allowlist")
		}
		return request{tunnel: true, method: r.Method, host: host}, nil
	case http.MethodGet, http.MethodHead:
	default:
		return q, refuse(protocol.CodeForbidden, "method "+printable(r.Method)+" is refused: only GET, HEAD and CONNECT to port 443")
	}
	u := r.URL
	if u == nil || !u.IsAbs() || u.Host == "" {
		return q, refuse(protocol.CodeInvalidField, "not a proxy request: use the absolute form GET http://host/path")
	}
	if u.Scheme != "http" {
		return q, refuse(protocol.CodeInvalidField, "scheme "+printable(u.Scheme)+" is refused: send http:// (fetched upstream over https) or CONNECT for https")
	}
	if u.User != nil || u.Opaque != "" || u.Fragment != "" {
		return q, refuse(protocol.CodeInvalidField, "user info, opaque URLs and fragments are refused")
	}
	host := strings.ToLower(u.Hostname())
	if p := u.Port(); p != "" && p != "80" {
		return q, refuse(protocol.CodeForbidden, "plain http is allowed to port 80 only")
	}
	if !allowed(host, allow) {
		return q, refuse(protocol.CodeForbidden, "host "+printable(host)+" is not on the policy's egress allowlist")
	}
	p := u.EscapedPath()
	if !cleanPath(u.Path, p) {
		return q, refuse(protocol.CodeInvalidField, "the path is not canonical (dot segments, control bytes, backslash or too long)")
	}
	if len(u.RawQuery) > maxQuery || !visible(u.RawQuery) {
		return q, refuse(protocol.CodeInvalidField, "the query is too long or holds control bytes")
	}
	return request{method: r.Method, host: host, path: p, query: u.RawQuery}, nil
}

func allowed(host string, allow map[string]bool) bool {
	return policy.ValidHost(host) && allow[host]
}

// cleanPath: absolute, bounded, visible ASCII, no backslash, and no "." or
// ".." segment in either the decoded or the escaped form, so the upstream
// and the cache key read the same resource.
func cleanPath(decoded, escaped string) bool {
	if !strings.HasPrefix(escaped, "/") || len(escaped) > maxPath || !visible(escaped) || strings.Contains(escaped, "\\") {
		return false
	}
	for _, p := range []string{decoded, escaped} {
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				return false
			}
		}
	}
	return !strings.ContainsAny(decoded, "\\\x00")
}

// visible: printable ASCII without space.
func visible(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// printable bounds and cleans a name echoed in a refusal.
func printable(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
