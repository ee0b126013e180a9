package sensor

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Redacted replaces every secret-shaped match.
const Redacted = "[REDACTED]"

// Redactor replaces secret-shaped strings. The patterns err towards
// redacting: a false positive costs the model a token of context, a false
// negative sends a credential to a third party.
type Redactor struct {
	patterns []*regexp.Regexp
}

// NewRedactor compiles the patterns. It is built per client, not held in a
// package variable.
func NewRedactor() *Redactor {
	src := []string{
		// PEM blocks, including one cut off before its END line.
		`(?s)-----BEGIN [A-Z0-9 ]{0,64}-----.*?(?:-----END [A-Z0-9 ]{0,64}-----|\z)`,
		// AWS access key ids and secret keys in assignments.
		`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[A-Z0-9]{16}\b`,
		`(?i)aws.{0,20}?(?:secret|key).{0,20}?[:=]\s*["']?[A-Za-z0-9/+=]{40}`,
		// Provider tokens with recognisable prefixes.
		`\bsk-[A-Za-z0-9_-]{16,}`,                                      // OpenAI-style, Anthropic sk-ant-
		`\bgh[pousr]_[A-Za-z0-9]{30,}`,                                 // GitHub
		`\bgithub_pat_[A-Za-z0-9_]{30,}`,                               // GitHub fine-grained
		`\bglpat-[A-Za-z0-9_-]{20,}`,                                   // GitLab
		`\bxox[abeprs]-[A-Za-z0-9-]{10,}`,                              // Slack
		`\bAIza[0-9A-Za-z_-]{35}`,                                      // Google
		`\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}`,                      // Stripe
		`\bnpm_[A-Za-z0-9]{36}`,                                        // npm
		`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`, // JWT
		// Authorization headers and credentials in URLs.
		`(?i)\b(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{16,}`,
		`(?i)\b[a-z][a-z0-9+.-]{1,15}://[^/\s:@]{1,256}:[^/\s@]{1,256}@`,
		// name = value where the name says it is secret.
		`(?i)[a-z0-9_.-]{0,40}(?:api[_-]?key|secret|token|passw(?:or)?d|passphrase|credential|private[_-]?key|access[_-]?key)[a-z0-9_.-]{0,40}["']?\s*[:=]\s*["']?[^\s"'<>]{6,}`,
	}
	r := &Redactor{}
	for _, s := range src {
		r.patterns = append(r.patterns, regexp.MustCompile(s))
	}
	return r
}

// Redact returns s with every secret-shaped match replaced.
func (r *Redactor) Redact(s string) string {
	for _, p := range r.patterns {
		s = p.ReplaceAllLiteralString(s, Redacted)
	}
	return s
}

// Truncated marks evidence that was cut.
const Truncated = "[TRUNCATED]"

// Prepare is how any text becomes evidence: cut to a working bound, redact,
// then cut to limit bytes. Both cuts fall back to a whitespace boundary so
// a secret straddling a cut is dropped whole rather than sent in part (a
// fragment too short for its pattern would otherwise slip through), and
// both land on a rune boundary.
func (r *Redactor) Prepare(s string, limit int) string {
	if limit <= len(Truncated) {
		return ""
	}
	// Redaction only shrinks text, and scanning is linear, so four times
	// the limit is enough context to redact what will be kept.
	s = cut(s, 4*limit)
	s = r.Redact(s)
	if len(s) <= limit {
		return s
	}
	return cut(s, limit-len(Truncated)) + Truncated
}

// cut returns at most n bytes of s, ending at a rune boundary and just
// after the last whitespace.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	if i := strings.LastIndexAny(s, " \t\r\n"); i >= 0 {
		return s[:i+1]
	}
	// No whitespace at all: a single token that long is opaque; drop it.
	return ""
}
