package main

import (
	"encoding/binary"
	"net/netip"
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

// watchNotifications answers every notified syscall. A call whose every
// destination stays in the domain (destination) continues; anything else is
// refused with EPERM and reported by number (the kernel names it).
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
		dest, local := destination(&req)
		id := req.ID
		if ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) != nil {
			continue // the task died: no call happened to anyone
		}
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		if local {
			resp = seccompNotifResp{ID: req.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		}
		if ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)) != nil || local {
			// Withdrawn: its task was killed. The filter waits killably
			// once a call is received (stage.go), so no other signal can
			// withdraw it and have it restarted and counted twice.
			continue
		}
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		v := &protocol.Violation{
			Nr: req.Nr, Args: req.Args[:], PID: inDomain, HostPID: int32(req.PID),
			MonotonicNs: ts.Nano(), Count: 1, Destination: dest,
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

// maxSendmmsg is how many messages of one sendmmsg the monitor examines; a
// longer batch is refused (a resolver sends two).
const maxSendmmsg = 64

// destination reads the addresses a notified connect, sendto, sendmsg or
// sendmmsg names from the parked worker's memory, and returns the first
// that leaves the domain, or local when none does: no address (the
// connected peer), a Unix socket (of the domain's own namespaces), or
// loopback. Any other call is not local. This is evidence, not
// enforcement: a racing thread of the worker may rewrite the address
// before the kernel copies it again, which can hide an attempt, never make
// it reach anything; the network namespace (only lo) is the boundary. Every
// read is bounded, and what it returns is parsed as hostile.
func destination(req *seccompNotif) (dest string, local bool) {
	read := func(addr uint64, n int) []byte {
		b := make([]byte, n)
		got, err := unix.ProcessVMReadv(int(req.PID), []unix.Iovec{{Base: &b[0], Len: uint64(n)}}, []unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
		if err != nil || got != n {
			return nil
		}
		return b
	}
	named := func(addr, n uint64) (string, bool) {
		if addr == 0 || uint32(n) == 0 {
			return "", true
		}
		return sockaddr(read(addr, int(min(uint32(n), 128)))) // the kernel refuses more
	}
	msghdr := func(p uint64) (string, bool) { // msg_name, msg_namelen
		if h := read(p, 12); h != nil {
			return named(binary.NativeEndian.Uint64(h), uint64(binary.NativeEndian.Uint32(h[8:])))
		}
		return "unreadable", false
	}
	a := req.Args
	switch req.Nr {
	case unix.SYS_CONNECT:
		return named(a[1], a[2])
	case unix.SYS_SENDTO:
		return named(a[4], a[5])
	case unix.SYS_SENDMSG:
		return msghdr(a[1])
	case unix.SYS_SENDMMSG:
		if uint32(a[2]) > maxSendmmsg {
			return "sendmmsg batch", false
		}
		for i := range uint64(uint32(a[2])) {
			if dest, ok := msghdr(a[1] + 64*i); !ok { // sizeof(struct mmsghdr)
				return dest, false
			}
		}
		return "", true
	}
	return "", false
}

// sockaddr names a socket address and says whether it stays in the domain.
// Linux connects 0.0.0.0 and :: to the local host, so they do too. UDP
// over IPv4 sends to an AF_UNSPEC address as to an AF_INET one.
func sockaddr(sa []byte) (string, bool) {
	if len(sa) < 2 {
		return "unreadable", false
	}
	var ip netip.Addr
	switch fam := binary.NativeEndian.Uint16(sa); {
	case fam == unix.AF_UNIX || fam == unix.AF_UNSPEC && len(sa) < 8:
		return "", true
	case (fam == unix.AF_INET || fam == unix.AF_UNSPEC) && len(sa) >= 8:
		ip = netip.AddrFrom4([4]byte(sa[4:8]))
	case fam == unix.AF_INET6 && len(sa) >= 24:
		ip = netip.AddrFrom16([16]byte(sa[8:24]))
	default:
		return "family " + strconv.Itoa(int(fam)), false
	}
	u := ip.Unmap()
	return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(sa[2:])).String(), u.IsLoopback() || u.IsUnspecified()
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
