package protocol

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCatalogueEntriesAreComplete(t *testing.T) {
	codes := Codes()
	if len(codes) == 0 {
		t.Fatal("empty catalogue")
	}
	for _, c := range codes {
		e := E(c)
		if e.Code != c {
			t.Errorf("E(%q).Code = %q", c, e.Code)
		}
		if strings.TrimSpace(e.Message) == "" {
			t.Errorf("%s has no message", c)
		}
		if string(c) != strings.ToLower(string(c)) || strings.ContainsAny(string(c), " -.") {
			t.Errorf("%s is not a snake_case code", c)
		}
		if !Known(c) {
			t.Errorf("Known(%q) = false", c)
		}
	}
}

func TestEOfUnknownCodeIsInternal(t *testing.T) {
	for _, c := range []Code{"", "no_such_code", "Frame_Too_Large", "internal "} {
		if got := E(c); got.Code != CodeInternal || got.Message != E(CodeInternal).Message {
			t.Errorf("E(%q) = %+v, want internal", c, got)
		}
		if Known(c) {
			t.Errorf("Known(%q) = true", c)
		}
	}
}

func TestAsWireNeverLeaksCause(t *testing.T) {
	const secret = "/etc/shadow: permission denied for user root"
	cases := []struct {
		name string
		err  error
		want Code
	}{
		{"plain Go error", errors.New(secret), CodeInternal},
		{"nil", nil, CodeInternal},
		{"Errorf", Errorf(CodePathUnsafe, "%s", secret), CodePathUnsafe},
		{"Errorf wrapping cause", Errorf(CodeMountFailed, "mount: %w", errors.New(secret)), CodeMountFailed},
		{"wrapped twice", fmt.Errorf("outer %s: %w", secret, Errorf(CodeDomainBusy, "%s", secret)), CodeDomainBusy},
		{"catalogue error with forged message", &Error{Code: CodeNotFound, Message: secret, Retryable: true}, CodeNotFound},
		{"forged code", &Error{Code: "made_up", Message: secret}, CodeInternal},
		{"joined", errors.Join(errors.New(secret), E(CodeFrameTimeout)), CodeFrameTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := AsWire(tc.err)
			if w.Code != tc.want {
				t.Fatalf("code %q, want %q", w.Code, tc.want)
			}
			if *w != *E(tc.want) {
				t.Fatalf("wire form %+v differs from the catalogue %+v", w, E(tc.want))
			}
			b, err := Encode(w)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "shadow") || strings.Contains(w.Error(), "shadow") {
				t.Fatalf("cause leaked: %s", b)
			}
		})
	}
}

func TestErrorfKeepsCauseLocally(t *testing.T) {
	cause := errors.New("local detail")
	err := Errorf(CodeCgroupFailed, "write: %w", cause)
	if !errors.Is(err, cause) {
		t.Error("cause is not reachable with errors.Is")
	}
	if !errors.Is(err, E(CodeCgroupFailed)) {
		t.Error("code is not reachable with errors.Is")
	}
	if errors.Is(err, E(CodeMountFailed)) {
		t.Error("errors.Is matched another code")
	}
	if !strings.Contains(err.Error(), "local detail") {
		t.Error("cause missing from the local error string")
	}
	if !E(CodeCgroupFailed).Retryable || E(CodeMountFailed).Retryable {
		t.Error("retryable flags differ from the catalogue")
	}
}
