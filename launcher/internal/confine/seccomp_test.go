package confine

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestProgramUsesNotify(t *testing.T) {
	ret := func(k uint32) []byte {
		return []byte{0x06, 0, 0, 0, byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
	}
	if !ProgramUsesNotify(ret(unix.SECCOMP_RET_USER_NOTIF)) || ProgramUsesNotify(ret(unix.SECCOMP_RET_ALLOW)) {
		t.Fatal("programUsesNotify misreads a return instruction")
	}
}
