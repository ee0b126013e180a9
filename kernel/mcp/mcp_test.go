package mcp

import (
	"errors"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// The tools' own checks, before any API call (the command's tests in
// kernel/cmd/autonomic drive every tool against a running kernel).
func TestInputChecks(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"0b6c1f0e-8d4e-4a53-9a57-3b1f3e2b9c11", true},
		{"0B6C1F0E-8D4E-4A53-9A57-3B1F3E2B9C11", true},
		{"urn:uuid:0b6c1f0e-8d4e-4a53-9a57-3b1f3e2b9c11", false},
		{"{0b6c1f0e-8d4e-4a53-9a57-3b1f3e2b9c11}", false},
		{"0b6c1f0e8d4e4a539a573b1f3e2b9c11", false},
		{"../../v1/kernel", false},
		{"", false},
	} {
		err := isID(c.id)
		var te *Error
		if (err == nil) != c.ok || (err != nil && (!errors.As(err, &te) || te.Code != protocol.CodeInvalidField)) {
			t.Errorf("isID(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
	}
	for _, c := range []struct{ in, want int }{{0, 50}, {1, 1}, {500, 500}, {501, -1}, {-1, -1}} {
		n, err := limit(c.in)
		if (c.want < 0) != (err != nil) || (err == nil && n != c.want) {
			t.Errorf("limit(%d) = %d, %v; want %d", c.in, n, err, c.want)
		}
	}
}
