package gates

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltRecordsWhatRan: the record qc reads names this run's launcher
// (the file the bed built, which its own preflight hashes alike) and
// rootfs, and the kernel binary running; a record whose digests disagree
// with the launcher's preflight is refused.
func TestBuiltRecordsWhatRan(t *testing.T) {
	if shared.err != nil {
		t.Fatalf("gates world: %v", shared.err)
	}
	path := filepath.Join(t.TempDir(), "built.json")
	if err := recordBuilt(path, shared.bed); err != nil {
		t.Fatal(err)
	}
	x, err := ReadBuilt(path)
	if err != nil {
		t.Fatal(err)
	}
	launcher, _ := fileSHA256(shared.bed.Launcher)
	kernel, _ := fileSHA256(shared.kernel)
	if x.LauncherSHA256 != launcher || x.RootfsDigest != shared.bed.RootfsDigest || x.KernelSHA256 != kernel {
		t.Fatalf("record %+v; built launcher %s, rootfs %s, kernel %s", x, launcher, shared.bed.RootfsDigest, kernel)
	}
	if len(x.Preflight.Limits) == 0 {
		t.Fatalf("the record carries no limits: %+v", x.Preflight)
	}
	// The scenario adds the launcher it reached through sudo.
	t.Setenv(BuiltEnv, path)
	recordServiceLauncher(t, launcher)
	if y, err := ReadBuilt(path); err != nil || y.ServiceLauncherSHA256 != launcher || y.KernelSHA256 != kernel {
		t.Fatalf("after the scenario's addition: %+v, %v", y, err)
	}
	// A second gate process that built the same: agreed, nothing changes.
	if err := recordBuilt(path, shared.bed); err != nil {
		t.Fatalf("a second process that built the same tree: %v", err)
	}
	// One that built something else fails instead of overwriting.
	other := *x
	other.KernelSHA256 = strings.Repeat("f", 64)
	if err := RecordBuilt(path, other); err == nil {
		t.Fatal("a gate process that built another kernel overwrote the record")
	}
	if y, err := ReadBuilt(path); err != nil || y.KernelSHA256 != kernel {
		t.Fatalf("after a disagreeing process: %+v, %v", y, err)
	}
	if err := RecordServiceLauncher(path, strings.Repeat("e", 64)); err == nil {
		t.Fatal("a second scenario that reached another launcher was recorded")
	}
	for _, bad := range []func(*Built){
		func(b *Built) { b.Preflight.LauncherSHA256 = strings.Repeat("0", 64) },
		func(b *Built) { b.Preflight.RootfsDigest = strings.Repeat("0", 64) },
		func(b *Built) { b.KernelSHA256 = "" },
	} {
		y := *x
		p := *x.Preflight
		y.Preflight = &p
		bad(&y)
		b, _ := json.Marshal(y)
		tampered := filepath.Join(t.TempDir(), "built.json")
		if err := os.WriteFile(tampered, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadBuilt(tampered); err == nil {
			t.Errorf("a record disagreeing with what ran was accepted: %+v", y)
		}
	}
}
