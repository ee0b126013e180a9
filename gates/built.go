package gates

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

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

// RecordBuilt writes x to path for qc, once per run: the first gate
// process creates the record, and every later one (each gate runs its
// tests in gate processes of its own) must have built the same rootfs and
// kernel, or it fails instead of overwriting — the report must never name
// one build while another ran. The launcher is each test bed's own build,
// whose bytes differ by the configuration path baked into it, so the
// record keeps the first process's launcher, with the preflight that
// vouches for it. qc removes the record before it starts the gates.
func RecordBuilt(path string, x Built) error {
	return withRecord(path, func(old *Built) (*Built, error) {
		if old == nil {
			return &x, nil
		}
		if old.RootfsDigest != x.RootfsDigest || old.KernelSHA256 != x.KernelSHA256 {
			return nil, fmt.Errorf("%s records rootfs %s, kernel %s; this gate process built rootfs %s, kernel %s",
				path, old.RootfsDigest, old.KernelSHA256, x.RootfsDigest, x.KernelSHA256)
		}
		return nil, nil
	})
}

// RecordServiceLauncher adds the installed launcher a scenario reached
// through sudo; two scenarios that reached different ones fail.
func RecordServiceLauncher(path, sha string) error {
	return withRecord(path, func(old *Built) (*Built, error) {
		switch {
		case old == nil:
			return nil, fmt.Errorf("%s: no record of what the gates built", path)
		case old.ServiceLauncherSHA256 == sha:
			return nil, nil
		case old.ServiceLauncherSHA256 != "":
			return nil, fmt.Errorf("%s: a scenario reached launcher %s, another %s", path, old.ServiceLauncherSHA256, sha)
		}
		old.ServiceLauncherSHA256 = sha
		return old, nil
	})
}

// withRecord runs fn on the record at path under an exclusive lock of
// path+".lock" (gate processes may run at once) and writes what fn
// returns, whole (a temporary file renamed over), when it is not nil.
func withRecord(path string, fn func(old *Built) (*Built, error)) error {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	var old *Built
	if _, err := os.Stat(path); err == nil {
		if old, err = ReadBuilt(path); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	x, err := fn(old)
	if err != nil || x == nil {
		return err
	}
	b, _ := json.MarshalIndent(x, "", "  ")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
