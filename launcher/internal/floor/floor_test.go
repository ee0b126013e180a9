package floor

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestProgramMatchesDigest recomputes the digest the launcher reports in
// preflight and started frames from the instructions it actually installs.
func TestProgramMatchesDigest(t *testing.T) {
	prog := Program()
	if len(prog) != 8*ProgramLen || len(prog) == 0 || len(prog) > 8*4096 {
		t.Fatalf("Program() has %d bytes, ProgramLen is %d instructions", len(prog), ProgramLen)
	}
	sum := sha256.Sum256(prog)
	if got := hex.EncodeToString(sum[:]); got != ProgramSHA256 {
		t.Fatalf("sha256(Program()) = %s, ProgramSHA256 = %s", got, ProgramSHA256)
	}
}

func TestProgramIsFreshEachCall(t *testing.T) {
	a := Program()
	a[4] ^= 0xff
	if b := Program(); b[4] == a[4] {
		t.Fatal("mutating one Program() result changed the next")
	}
}
