package notifier

import (
	"encoding/binary"
	"net/netip"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/autonomic-kernel/autonomic/launcher/internal/confine"
	"github.com/autonomic-kernel/autonomic/launcher/internal/fsat"
	"github.com/autonomic-kernel/autonomic/launcher/internal/wire"
	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
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

// notifyRate and notifyBurst bound how many notified calls a domain's
// notifier answers a second: past them the calling task stays parked in
// its call until the next token, so a sendmmsg loop costs the notifier (in
// the domain's cgroup) bounded CPU and the worker waits instead.
const (
	notifyRate  = 4096
	notifyBurst = 256
)

// serveNotifications is the notifier's loop, inside the domain: it answers
// every notified syscall. A call whose every destination stays in the
// domain (destination) continues; anything else is reported, with a pidfd
// of its caller, and refused with EPERM.
func serveNotifications(listener int, report func(v *protocol.Violation, pidfd int)) {
	defer unix.Close(listener)
	tokens, last := float64(notifyBurst), time.Now()
	pfd := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
	for {
		now := time.Now()
		tokens = min(notifyBurst, tokens+now.Sub(last).Seconds()*notifyRate)
		last = now
		if tokens < 1 {
			time.Sleep(time.Duration((1 - tokens) / notifyRate * float64(time.Second)))
			continue
		}
		pfd[0].Revents = 0
		n, err := unix.Poll(pfd, -1)
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
		tokens--
		// The task is parked in the notified call until we answer, so its
		// pid names it now; ID_VALID afterwards proves it still does (the
		// pid cannot have been reused in between), and so does the pidfd
		// taken before. The notifier is in the domain's PID namespace:
		// the pid is the domain's.
		dest, local := destination(&req)
		pidfd := -1
		if !local {
			pidfd, _ = unix.PidfdOpen(int(req.PID), 0)
		}
		id := req.ID
		if ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) != nil {
			fsat.CloseAll(pidfd)
			continue // the task died: no call happened to anyone
		}
		resp := seccompNotifResp{ID: req.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		if !local {
			// Reported before it is answered: once answered, the worker
			// may exit at once, and its domain's end (the PID namespace)
			// ends the notifier too, with the report unsent. A call whose
			// task a fatal signal withdraws now was still attempted, and
			// the filter waits killably once a call is received (stage.go),
			// so no other signal can withdraw it and have it restarted and
			// counted twice.
			var ts unix.Timespec
			_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			report(&protocol.Violation{Nr: req.Nr, Args: req.Args[:], PID: int32(req.PID), MonotonicNs: ts.Nano(), Count: 1, Destination: dest}, pidfd)
			fsat.CloseAll(pidfd)
			resp = seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		}
		_ = ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

// notifierCaps is all the notifier keeps, in the domain's user namespace:
// reading a parked worker's memory (process_vm_readv) whatever it did to
// its own dumpability.
const notifierCaps = 1 << unix.CAP_SYS_PTRACE

// Run is the domain's notifier: started by the init as it starts
// (while the init still has a bounding set to give), inside the domain's
// user, PID and cgroup namespaces and its cgroup, so the work a worker's
// notified calls cause is the domain's, never a host-root process's. It
// keeps only notifierCaps, with no_new_privs, waits for the seccomp
// listener the monitor passes on fd 3 and answers on it until every
// filtered task is gone.
func Run() int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	ch := os.NewFile(3, "notify")
	if err := confine.KeepCaps(notifierCaps); err != nil {
		return 1
	}
	_, fds, err := wire.Recv(ch, time.Time{})
	if err != nil || len(fds) != 1 {
		fsat.CloseAll(fds...)
		return 1
	}
	serveNotifications(fds[0], func(v *protocol.Violation, pidfd int) {
		var rights []int
		if pidfd >= 0 {
			rights = []int{pidfd}
		}
		_ = wire.SendReply(ch, wire.Reply{Violation: v}, rights)
	})
	return 0
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
	// msghdrs reads n message headers (struct mmsghdr is 64 bytes, its
	// msghdr first; a lone msghdr is read as one) and then every name
	// they point at: two reads, the second one vectored, whatever n is.
	msghdrs := func(p uint64, n, stride int) (string, bool) {
		hs := read(p, (n-1)*stride+12)
		if hs == nil {
			return "unreadable", false
		}
		buf := make([]byte, 0, n*128)
		var local []unix.Iovec
		var remote []unix.RemoteIovec
		var offs []int
		for i := range n {
			h := hs[i*stride:]
			addr, l := binary.NativeEndian.Uint64(h), binary.NativeEndian.Uint32(h[8:])
			if addr == 0 || l == 0 {
				continue // the connected peer
			}
			l = min(l, 128) // the kernel refuses more
			offs = append(offs, len(buf))
			buf = buf[:len(buf)+int(l)]
			local = append(local, unix.Iovec{Base: &buf[offs[len(offs)-1]], Len: uint64(l)})
			remote = append(remote, unix.RemoteIovec{Base: uintptr(addr), Len: int(l)})
		}
		if len(remote) == 0 {
			return "", true
		}
		got, err := unix.ProcessVMReadv(int(req.PID), local, remote, 0)
		if err != nil || got != len(buf) {
			return "unreadable", false
		}
		for i, off := range offs {
			if dest, ok := sockaddr(buf[off : off+remote[i].Len]); !ok {
				return dest, false
			}
		}
		return "", true
	}
	a := req.Args
	switch req.Nr {
	case unix.SYS_CONNECT:
		return named(a[1], a[2])
	case unix.SYS_SENDTO:
		return named(a[4], a[5])
	case unix.SYS_SENDMSG:
		return msghdrs(a[1], 1, 0)
	case unix.SYS_SENDMMSG:
		switch n := uint32(a[2]); {
		case n > maxSendmmsg:
			return "sendmmsg batch", false
		case n == 0:
			return "", true
		default:
			return msghdrs(a[1], int(n), 64)
		}
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

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
