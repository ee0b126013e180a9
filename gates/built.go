package gates

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// BuiltEnv names the file the gates' TestMain writes Built to; qc sets it
// so the conformance report names the binaries the gates built and ran,
// not whatever happens to be installed.
const BuiltEnv = "AUTONOMIC_GATES_BUILT"

// Built is what the gate run built from this tree and ran: the test bed's
// launcher and rootfs (the launcher's own preflight of them, limits
// included) and the kernel binary (kernel/cmd/autonomic), which the
// scenario runs as the service account. The scenario's domains come from
// the installed launcher, which it first proves is this tree's build.
type Built struct {
	LauncherSHA256 string                    `json:"launcher_sha256"`
	RootfsDigest   string                    `json:"rootfs_digest"`
	KernelSHA256   string                    `json:"kernel_sha256"`
	Kernel         string                    `json:"kernel"` // what KernelSHA256 is the digest of
	Preflight      *protocol.PreflightReport `json:"preflight"`
	// ServiceLauncherSHA256 is the installed launcher the scenario reached
	// through sudo, which it proved is this tree's build (set by
	// TestCodingAgentScenario; empty if it did not get that far).
	ServiceLauncherSHA256 string `json:"service_launcher_sha256,omitempty"`
}

// ReadBuilt reads and checks a Built record: every digest present, and the
// launcher's own preflight agreeing with the files the bed built.
func ReadBuilt(path string) (*Built, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var x Built
	if err := json.Unmarshal(b, &x); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case x.LauncherSHA256 == "" || x.RootfsDigest == "" || x.KernelSHA256 == "" || x.Preflight == nil:
		return nil, fmt.Errorf("%s: incomplete record", path)
	case x.Preflight.LauncherSHA256 != x.LauncherSHA256:
		return nil, fmt.Errorf("%s: the launcher's preflight reports sha256 %s, the bed built %s", path, x.Preflight.LauncherSHA256, x.LauncherSHA256)
	case x.Preflight.RootfsDigest != x.RootfsDigest:
		return nil, fmt.Errorf("%s: the launcher's preflight reports rootfs %s, the bed built %s", path, x.Preflight.RootfsDigest, x.RootfsDigest)
	}
	return &x, nil
}
