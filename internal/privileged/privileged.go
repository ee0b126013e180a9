package privileged

import (
	"os"
	"testing"
)

// Required reports whether privileged tests are mandatory in this run.
func Required() bool { return os.Getenv("AUTONOMIC_REQUIRE_PRIVILEGED") == "1" }

// Require skips t unless the process runs as root; when privileged tests are
// mandatory it fails t instead of skipping.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if Required() {
		t.Fatalf("AUTONOMIC_REQUIRE_PRIVILEGED=1 but not running as root")
	}
	t.Skip("needs root")
}

// Skip skips t for a reason that is not a missing privilege (for example a
// missing host feature); when privileged tests are mandatory it fails
// instead, so CI cannot pass by skipping.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("AUTONOMIC_REQUIRE_PRIVILEGED=1 forbids skipping: %s", reason)
	}
	t.Skip(reason)
}
