package main

import (
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// seccompNotif and seccompNotifResp mirror struct seccomp_notif and
// struct seccomp_notif_resp (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// violationBudget is how many violation frames per second go out one by
// one; beyond it, attempts are counted per syscall and flushed once a
// second, so a flood costs the monitor bounded memory and output.
const violationBudget = 64

// watchNotifications answers every notified syscall with EPERM and reports
// it by number (the kernel names it). It reads only the notification's
// registers: pointers in the arguments belong to the worker and are never
// dereferenced.
func watchNotifications(listener int, stop <-chan struct{}, out *frameWriter) {
	defer unix.Close(listener)
	windowStart, sent := time.Now(), 0
	pending := map[int32]*protocol.Violation{}
	flush := func() {
		for nr, v := range pending {
			out.send(&protocol.LauncherResponse{Type: protocol.TypeViolation, Violation: v})
			delete(pending, nr)
		}
	}
	defer flush()
	pfd := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
	for {
		select {
		case <-stop:
			return
		default:
		}
		if time.Since(windowStart) >= time.Second {
			flush()
			windowStart, sent = time.Now(), 0
		}
		pfd[0].Revents = 0
		n, err := unix.Poll(pfd, 100)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil || pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 && pfd[0].Revents&unix.POLLIN == 0 {
			return // every filtered task is gone
		}
		var req seccompNotif
		if err := ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			continue // EINTR, or the task died before we read it
		}
		// The task is parked in the notified call until we answer, so its
		// pid names it now; ID_VALID afterwards proves it still does (the
		// pid cannot have been reused in between).
		inDomain := domainPID(req.PID)
		id := req.ID
		if ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) != nil {
			continue // the task died: no call happened to anyone
		}
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		if ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)) != nil {
			// Withdrawn: its task was killed. The filter waits killably
			// once a call is received (stage.go), so no other signal can
			// withdraw it and have it restarted and counted twice.
			continue
		}
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		v := &protocol.Violation{
			Nr: req.Nr, Args: req.Args[:], PID: inDomain, HostPID: int32(req.PID),
			MonotonicNs: ts.Nano(), Count: 1,
		}
		if sent < violationBudget {
			sent++
			out.send(&protocol.LauncherResponse{Type: protocol.TypeViolation, Violation: v})
			continue
		}
		if p, ok := pending[req.Nr]; ok {
			p.Count++
			p.MonotonicNs = v.MonotonicNs
		} else {
			pending[req.Nr] = v
		}
	}
}

// domainPID translates a host pid (as notifications report it to a
// listener in the host's PID namespace) to the pid the worker has inside its
// domain: the last NSpid entry. 0 if the task is already gone.
func domainPID(host uint32) int32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(host), 10) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.ParseInt(f[len(f)-1], 10, 32); err == nil {
					return int32(n)
				}
			}
		}
	}
	return 0
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
