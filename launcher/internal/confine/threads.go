package confine

import (
	"syscall"
)

// AllThreads runs one syscall on every thread of the process.
// AllThreadsSyscall needs a binary without cgo, which
// scripts/build_launcher.sh proves the launcher is.
func AllThreads(trap, a1, a2, a3 uintptr) error {
	if _, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3); e != 0 {
		return e
	}
	return nil
}
