package floor

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// TestProgramMatchesDigest recomputes the digest the launcher reports in
// preflight and started frames from the instructions it actually installs.
func TestProgramMatchesDigest(t *testing.T) {
	prog := Program()
	if len(prog) != ProgramLen || len(prog) == 0 || len(prog) > 4096 {
		t.Fatalf("Program() has %d instructions, ProgramLen is %d", len(prog), ProgramLen)
	}
	raw := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		raw = binary.LittleEndian.AppendUint16(raw, in.Code)
		raw = append(raw, in.Jt, in.Jf)
		raw = binary.LittleEndian.AppendUint32(raw, in.K)
	}
	sum := sha256.Sum256(raw)
	if got := hex.EncodeToString(sum[:]); got != ProgramSHA256 {
		t.Fatalf("sha256(Program()) = %s, ProgramSHA256 = %s", got, ProgramSHA256)
	}
}

func TestProgramIsFreshEachCall(t *testing.T) {
	a := Program()
	a[0].K ^= 0xffffffff
	if b := Program(); b[0].K == a[0].K {
		t.Fatal("mutating one Program() result changed the next")
	}
}
