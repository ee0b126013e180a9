package notifier

import (
	"encoding/binary"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func inet4(fam uint16, ip string, port uint16) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint16(b, fam)
	binary.BigEndian.PutUint16(b[2:], port)
	a := netip.MustParseAddr(ip).As4()
	copy(b[4:], a[:])
	return b
}

func inet6(ip string, port uint16) []byte {
	b := make([]byte, 28)
	binary.NativeEndian.PutUint16(b, unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:], port)
	a := netip.MustParseAddr(ip).As16()
	copy(b[8:], a[:])
	return b
}

// TestSockaddr: only what stays in the domain is local; every refusal names
// what was refused.
func TestSockaddr(t *testing.T) {
	unixAddr := append(binary.NativeEndian.AppendUint16(nil, unix.AF_UNIX), "/run/autonomic/inference.sock"...)
	cases := []struct {
		name  string
		sa    []byte
		dest  string
		local bool
	}{
		{"loopback", inet4(unix.AF_INET, "127.0.0.1", 8787), "127.0.0.1:8787", true},
		{"loopback /8", inet4(unix.AF_INET, "127.200.0.9", 80), "127.200.0.9:80", true},
		{"any", inet4(unix.AF_INET, "0.0.0.0", 80), "0.0.0.0:80", true},
		{"private", inet4(unix.AF_INET, "10.0.0.1", 443), "10.0.0.1:443", false},
		{"public", inet4(unix.AF_INET, "1.1.1.1", 53), "1.1.1.1:53", false},
		{"unspec as inet (udp)", inet4(unix.AF_UNSPEC, "1.1.1.1", 53), "1.1.1.1:53", false},
		{"unspec disconnect", inet4(unix.AF_UNSPEC, "0.0.0.0", 0), "0.0.0.0:0", true},
		{"unspec short", binary.NativeEndian.AppendUint16(nil, unix.AF_UNSPEC), "", true},
		{"v6 loopback", inet6("::1", 8787), "[::1]:8787", true},
		{"v6 any", inet6("::", 8787), "[::]:8787", true},
		{"v4-mapped loopback", inet6("::ffff:127.0.0.1", 80), "[::ffff:127.0.0.1]:80", true},
		{"v4-mapped public", inet6("::ffff:1.1.1.1", 80), "[::ffff:1.1.1.1]:80", false},
		{"v6 global", inet6("2606:4700:4700::1111", 443), "[2606:4700:4700::1111]:443", false},
		{"v6 short", inet6("::1", 80)[:20], "family 10", false},
		{"v4 short", inet4(unix.AF_INET, "127.0.0.1", 80)[:6], "family 2", false},
		{"unix", unixAddr, "", true},
		{"netlink", binary.NativeEndian.AppendUint16(make([]byte, 0, 12), unix.AF_NETLINK), "family 16", false},
		{"unreadable", nil, "unreadable", false},
		{"one byte", []byte{2}, "unreadable", false},
	}
	for _, c := range cases {
		if dest, local := sockaddr(c.sa); dest != c.dest || local != c.local {
			t.Errorf("%s: sockaddr = %q, %v; want %q, %v", c.name, dest, local, c.dest, c.local)
		}
	}
}

// FuzzSockaddr: any bytes give an answer, and an AF_INET or AF_INET6
// address is local only if it is loopback or unspecified.
func FuzzSockaddr(f *testing.F) {
	f.Add(inet4(unix.AF_INET, "127.0.0.1", 8787))
	f.Add(inet6("::ffff:1.1.1.1", 80))
	f.Fuzz(func(t *testing.T, sa []byte) {
		dest, local := sockaddr(sa)
		if !local || len(sa) < 8 {
			return
		}
		var ip netip.Addr
		switch binary.NativeEndian.Uint16(sa) {
		case unix.AF_INET, unix.AF_UNSPEC:
			ip = netip.AddrFrom4([4]byte(sa[4:8]))
		case unix.AF_INET6:
			if len(sa) < 24 {
				t.Fatalf("%x: a short AF_INET6 address is local (%q)", sa, dest)
			}
			ip = netip.AddrFrom16([16]byte(sa[8:24])).Unmap()
		default:
			return
		}
		if !ip.IsLoopback() && !ip.IsUnspecified() {
			t.Fatalf("%x: %s is local", sa, ip)
		}
	})
}

// TestDestinationReadsABatchAtOnce: a sendmmsg's names are read from the
// caller (here this process) in one vectored read, headers without a name
// are the connected peer, and the first name that leaves the domain is
// the one reported.
func TestDestinationReadsABatchAtOnce(t *testing.T) {
	type mmsghdr struct {
		hdr unix.Msghdr
		n   uint32
		_   [4]byte
	}
	names := [][]byte{inet4(unix.AF_INET, "127.0.0.1", 9), nil, inet4(unix.AF_INET, "9.9.9.9", 53), inet4(unix.AF_INET, "8.8.8.8", 53)}
	var msgs [4]mmsghdr
	for i, n := range names {
		if n != nil {
			msgs[i].hdr.Name, msgs[i].hdr.Namelen = &n[0], uint32(len(n))
		}
	}
	req := func(count uint64) *seccompNotif {
		return &seccompNotif{PID: uint32(os.Getpid()), Nr: unix.SYS_SENDMMSG, Args: [6]uint64{3, uint64(uintptr(unsafe.Pointer(&msgs[0]))), count}}
	}
	if dest, local := destination(req(2)); !local || dest != "" {
		t.Errorf("loopback and the connected peer: %q %v", dest, local)
	}
	if dest, local := destination(req(4)); local || dest != "9.9.9.9:53" {
		t.Errorf("batch with two outside names: %q %v, want the first", dest, local)
	}
	if dest, local := destination(req(maxSendmmsg + 1)); local || dest != "sendmmsg batch" {
		t.Errorf("oversized batch: %q %v", dest, local)
	}
	runtime.KeepAlive(names)
	runtime.KeepAlive(&msgs)
}
