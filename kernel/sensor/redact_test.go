package sensor

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRedact(t *testing.T) {
	r := NewRedactor()
	cases := []struct{ in, secret string }{
		{"key sk-abcdefghijklmnopqrstuvwxyz123456 here", "sk-abcdefghijklmnopqrstuvwxyz123456"},
		{"anthropic sk-ant-api03-abcdefghijklmnopqrstuv", "sk-ant-api03-abcdefghijklmnopqrstuv"},
		{"AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"},
		{"aws_secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n-----END RSA PRIVATE KEY-----", "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu"},
		{"cut off -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU"},
		{"ghp_0123456789abcdefghijklmnopqrstuvwxyz", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"},
		{"github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop"},
		{"xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"},
		{"AIzaSyA-1234567890abcdefghijklmnopqrstu", "AIzaSyA-1234567890abcdefghijklmnopqrstu"},
		{"sk_live_abcdefghijklmnop1234", "sk_live_abcdefghijklmnop1234"},
		{"Authorization: Bearer abc.def-ghi_jkl~mno+pqr", "abc.def-ghi_jkl~mno+pqr"},
		{"https://user:pa55word@git.example.com/x", "pa55word"},
		{`DATABASE_PASSWORD="correct horse"`, "correct"},
		{"api_key=0123456789abcdef", "0123456789abcdef"},
		{`{"client_secret": "s3cr3t-value-xyz"}`, "s3cr3t-value-xyz"},
	}
	for _, c := range cases {
		out := r.Redact(c.in)
		if strings.Contains(out, c.secret) || !strings.Contains(out, Redacted) {
			t.Errorf("%q → %q", c.in, out)
		}
	}
	for _, benign := range []string{"func main() {}", "commit 3f2a9c1d4e5b6a7980abcdef0123456789abcdef", "lib/auth.ex", "the token count is 12"} {
		if out := r.Redact(benign); out != benign {
			t.Errorf("benign %q → %q", benign, out)
		}
	}
}

func TestPrepareBounds(t *testing.T) {
	r := NewRedactor()
	secret := "AKIAIOSFODNN7EXAMPLE"
	for _, limit := range []int{16, 40, 100, 1000} {
		for shift := 0; shift < 30; shift++ {
			s := strings.Repeat("é", shift) + " word " + secret + " tail " + strings.Repeat("x ", 200)
			out := r.Prepare(s, limit)
			if len(out) > limit || !utf8.ValidString(out) {
				t.Fatalf("limit %d: %d bytes, valid %v", limit, len(out), utf8.ValidString(out))
			}
			// No prefix of the secret long enough to be useful survives.
			if strings.Contains(out, secret[:8]) {
				t.Fatalf("limit %d shift %d: part of the secret survived: %q", limit, shift, out)
			}
		}
	}
	if r.Prepare("short", 100) != "short" {
		t.Fatal("short text changed")
	}
	if got := r.Prepare(strings.Repeat("a", 500), 100); got != "" && got != Truncated {
		t.Fatalf("an opaque token was partly kept: %q", got)
	}
}
