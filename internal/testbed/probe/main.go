// Command autonomic-probe makes raw system calls from inside a domain and
// prints what the kernel answered, one "name=result" line each. Tests run it
// as a worker to prove what the seccomp floor and profiles refuse.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func report(name string, errno syscall.Errno) {
	if errno == 0 {
		fmt.Printf("%s=ok\n", name)
		return
	}
	fmt.Printf("%s=%s\n", name, unix.ErrnoName(errno))
}

func socket(family int) syscall.Errno {
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return e
}

// floorCalls are invoked with arguments that are harmless even when a
// filter fails to refuse them (bad pointers, invalid fds, zero flags).
func floorCalls() map[string][6]uintptr {
	bad := uintptr(0)
	return map[string][6]uintptr{
		"mount": {bad, bad, bad, 0, bad}, "umount2": {bad, 0}, "pivot_root": {bad, bad},
		"fsopen": {bad, 0}, "fsconfig": {^uintptr(0), 0, bad, bad, 0}, "fsmount": {^uintptr(0), 0, 0},
		"open_tree": {^uintptr(0), bad, 0}, "move_mount": {^uintptr(0), bad, ^uintptr(0), bad, 0},
		"mount_setattr": {^uintptr(0), bad, 0, bad, 0}, "unshare": {0}, "setns": {^uintptr(0), 0},
		"ptrace": {unix.PTRACE_TRACEME}, "process_vm_readv": {0, bad, 0, bad, 0, 0},
		"process_vm_writev": {0, bad, 0, bad, 0, 0}, "bpf": {^uintptr(0), bad, 0},
		"perf_event_open": {bad, 0, ^uintptr(0), ^uintptr(0), 0}, "keyctl": {^uintptr(0)}, "add_key": {bad, bad, bad, 0, 0},
		"request_key": {bad, bad, bad, 0}, "userfaultfd": {0}, "io_uring_setup": {0, bad},
		"io_uring_enter": {^uintptr(0), 0, 0, 0, bad, 0}, "io_uring_register": {^uintptr(0), 0, bad, 0},
		"kexec_load": {0, 0, bad, 0}, "kexec_file_load": {^uintptr(0), ^uintptr(0), 0, bad, 0},
		"init_module": {bad, 0, bad}, "finit_module": {^uintptr(0), bad, 0}, "delete_module": {bad, 0},
		"open_by_handle_at": {^uintptr(0), bad, 0}, "iopl": {0}, "ioperm": {0, 0, 0},
		"reboot": {0, 0, 0, bad}, "swapon": {bad, 0}, "swapoff": {bad}, "syslog": {3, bad, 0},
		"acct": {bad}, "quotactl": {0, bad, 0, bad}, "modify_ldt": {0, bad, 0}, "chroot": {bad},
	}
}

var floorNrs = map[string]uintptr{
	"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "fsopen": unix.SYS_FSOPEN,
	"fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "open_tree": unix.SYS_OPEN_TREE, "move_mount": unix.SYS_MOVE_MOUNT,
	"mount_setattr": unix.SYS_MOUNT_SETATTR, "unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "ptrace": unix.SYS_PTRACE,
	"process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "bpf": unix.SYS_BPF,
	"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY,
	"request_key": unix.SYS_REQUEST_KEY, "userfaultfd": unix.SYS_USERFAULTFD, "io_uring_setup": unix.SYS_IO_URING_SETUP,
	"io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER, "kexec_load": unix.SYS_KEXEC_LOAD,
	"kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE,
	"delete_module": unix.SYS_DELETE_MODULE, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "iopl": unix.SYS_IOPL,
	"ioperm": unix.SYS_IOPERM, "reboot": unix.SYS_REBOOT, "swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF,
	"syslog": unix.SYS_SYSLOG, "acct": unix.SYS_ACCT, "quotactl": unix.SYS_QUOTACTL, "modify_ldt": unix.SYS_MODIFY_LDT,
	"chroot": unix.SYS_CHROOT,
}

// families are the socket families the probe tries; the floor leaves a
// worker AF_UNIX, AF_INET and AF_INET6 only.
var families = map[string]uintptr{
	"unspec": unix.AF_UNSPEC, "unix": unix.AF_UNIX, "inet": unix.AF_INET, "ax25": unix.AF_AX25, "ipx": unix.AF_IPX,
	"appletalk": unix.AF_APPLETALK, "x25": unix.AF_X25, "inet6": unix.AF_INET6, "key": unix.AF_KEY,
	"netlink": unix.AF_NETLINK, "packet": unix.AF_PACKET, "alg": unix.AF_ALG, "vsock": unix.AF_VSOCK,
	"xdp": unix.AF_XDP, "unix-highbits": 1<<32 | unix.AF_UNIX, "vsock-highbits": 1<<32 | unix.AF_VSOCK,
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: autonomic-probe socket-inet|socket-inet6|socket-unix|floor|clone-newuser|fork|tiocsti|x32|sigsys-inet|hog MIB|forks N|spin MS")
		os.Exit(2)
	}
	for i := 1; i < len(os.Args); i++ {
		what := os.Args[i]
		switch what {
		case "socket-inet":
			report(what, socket(unix.AF_INET))
		case "socket-inet6":
			report(what, socket(unix.AF_INET6))
		case "socket-unix":
			report(what, socket(unix.AF_UNIX))
		case "floor":
			for name, args := range floorCalls() {
				_, _, e := unix.RawSyscall6(floorNrs[name], args[0], args[1], args[2], args[3], args[4], args[5])
				report("floor:"+name, e)
			}
		case "families":
			// Raw socket(2), each family with SOCK_DGRAM (every family that
			// exists accepts some type; the floor looks at the family only).
			for name, fam := range families {
				fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, fam, unix.SOCK_DGRAM, 0)
				if e == 0 {
					unix.Close(int(fd))
				}
				report("family:"+name, e)
			}
			var sv [2]int32
			_, _, e := unix.RawSyscall6(unix.SYS_SOCKETPAIR, unix.AF_NETLINK, unix.SOCK_DGRAM, 0, uintptr(unsafe.Pointer(&sv)), 0, 0)
			report("socketpair-netlink", e)
		case "newer":
			// open_tree_attr (467, Linux 6.15) and the numbers after it: the
			// floor was reviewed through 466 and answers ENOSYS above.
			for _, nr := range []uintptr{467, 468, 469, 470, 511} {
				_, _, e := unix.RawSyscall6(nr, ^uintptr(0), 0, 0, 0, 0, 0)
				report(fmt.Sprintf("newer:%d", nr), e)
			}
		case "personality":
			_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
			report("personality-query", e)
			_, _, e = unix.RawSyscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0) // ADDR_NO_RANDOMIZE
			report("personality-norandom", e)
			_, _, e = unix.RawSyscall(unix.SYS_PERSONALITY, 0, 0, 0)
			report("personality-linux", e)
		case "longpath":
			// 20 directories of 250-byte names: a 5,000-byte path, longer
			// than PATH_MAX, reached one level at a time.
			long := strings.Repeat("l", 250)
			fd, err := unix.Open("/workspace", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			for i := 0; err == nil && i < 20; i++ {
				if err = unix.Mkdirat(fd, long, 0o755); err == nil {
					var next int
					next, err = unix.Openat(fd, long, unix.O_RDONLY|unix.O_DIRECTORY, 0)
					unix.Close(fd)
					fd = next
				}
			}
			fmt.Printf("longpath=%v\n", err)
		case "nest":
			// 21,000 directories, each inside the last, in /workspace: deeper
			// than any descriptor limit a walker holding one per level meets.
			fd, err := unix.Open("/workspace", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			for i := 0; err == nil && i < 21000; i++ {
				if err = unix.Mkdirat(fd, "d", 0o755); err == nil {
					var next int
					next, err = unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
					unix.Close(fd)
					fd = next
				}
			}
			fmt.Printf("nest=%v\n", err)
		case "clone-newuser":
			_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
			report("unshare-newuser", e)
			// clone with a namespace flag; on success the child exits at once.
			pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
			if e == 0 && pid == 0 {
				unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
			}
			report(what, e)
		case "fork":
			pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
			if e == 0 && pid == 0 {
				unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
			}
			if e == 0 {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(int(pid), &ws, 0, nil)
			}
			report(what, e)
		case "tiocsti":
			c := byte('x')
			_, _, e := unix.RawSyscall(unix.SYS_IOCTL, 0, unix.TIOCSTI|1<<32, uintptr(unsafe.Pointer(&c)))
			report(what, e)
		case "x32":
			fmt.Println("x32=calling")
			_, _, e := unix.RawSyscall(unix.SYS_GETPID|0x40000000, 0, 0, 0)
			report(what, e) // not reached: the floor kills the process
		case "socket-flood":
			// 1000 attempts as fast as possible: the monitor must coalesce.
			refused := 0
			for i := 0; i < 1000; i++ {
				if socket(unix.AF_INET) == unix.EPERM {
					refused++
				}
			}
			fmt.Printf("socket-flood=%d\n", refused)
		case "sigsys-inet":
			// A hostile worker catches SIGSYS to hide trapped calls; a
			// notified call is not a signal, so this changes nothing.
			signal.Notify(make(chan os.Signal, 1), syscall.SIGSYS)
			report(what, socket(unix.AF_INET))
		case "connect-effect":
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err == nil {
				err = unix.Connect(fd, &unix.SockaddrUnix{Name: "/run/autonomic/effect.sock"})
			}
			report(what, errnoOf(err))
		case "connect-tcp", "udp-sendto", "udp-sendmsg", "connect-unix", "connect-abstract":
			report(what+":"+os.Args[i+1], dial(what, os.Args[i+1]))
			i++
		case "loopback":
			for _, network := range []string{"tcp4", "tcp6", "udp4", "udp6"} {
				fmt.Printf("loopback:%s=%s\n", network, loopback(network))
			}
		case "connect-badptr":
			// An address the monitor cannot read: refused, reported.
			fd, _ := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
			_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), 8, 16)
			report(what, e)
		case "udp-sendmmsg":
			// Two datagrams in one call, the first to this domain's
			// loopback, the second to ADDR.
			report(what+":"+os.Args[i+1], sendmmsg(os.Args[i+1]))
			i++
		case "sendmmsg-loop":
			// sendmmsg of 64 datagrams to this domain's loopback, over and
			// over for N ms: every call notified, every one local. Prints
			// the calls made and this process's CPU time.
			sendmmsgLoop(arg(&i))
		case "connect-loop":
			// N loopback connects (and closes), timed: what a notified
			// connect costs a worker.
			connectLoop(arg(&i))
		case "http":
			// GET a URL (http://host:port/path) or, with "unix:PATH", the
			// path /probe over that Unix socket; prints status and body.
			fmt.Printf("http=%s\n", httpGet(os.Args[i+1]))
			i++
		case "domain-root":
			domainRoot()
		case "hog":
			hog(arg(&i))
		case "forks":
			forks(arg(&i))
		case "spin":
			spin(arg(&i))
		default:
			fmt.Fprintln(os.Stderr, "unknown probe", what)
			os.Exit(2)
		}
	}
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EINVAL
}

// domainRoot runs as a domain's uid 0 (a test nsenters a worker's user and
// mount namespaces) and tries every way out of the locked mounts.
func domainRoot() {
	report("remount-rw", errnoOf(unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND, "")))
	report("setattr-rw", errnoOf(unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY})))
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err == nil {
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID})
	}
	report("clone-rw", errnoOf(err))
	fd, err = unix.Open("/etc/autonomic-planted", unix.O_CREAT|unix.O_WRONLY, 0o644)
	report("write-rootfs", errnoOf(err))
	fd, err = unix.Open("/usr/bin/autonomic-suid", unix.O_CREAT|unix.O_WRONLY, 0o4755)
	report("setuid-rootfs", errnoOf(err))
	report("chmod-rootfs", errnoOf(unix.Chmod("/usr/bin/cat", 0o4755)))
	for _, mask := range []string{"/proc/kcore", "/proc/timer_list", "/proc/sched_debug"} {
		if _, err := os.Stat(mask); err == nil {
			report("umount-mask", errnoOf(unix.Unmount(mask, unix.MNT_DETACH)))
			break
		}
	}
	report("umount-procsys", errnoOf(unix.Unmount("/proc/sys", unix.MNT_DETACH)))
	var st unix.Stat_t
	if err := unix.Stat("/usr/bin/cat", &st); err == nil {
		fmt.Printf("rootfs-owner=%d:%d\n", st.Uid, st.Gid)
	}
}

// arg consumes the numeric argument after os.Args[*i].
func arg(i *int) int {
	*i++
	if *i >= len(os.Args) {
		fmt.Fprintln(os.Stderr, "missing number after", os.Args[*i-1])
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[*i])
	if err != nil || n < 0 {
		fmt.Fprintln(os.Stderr, "bad number", os.Args[*i])
		os.Exit(2)
	}
	return n
}

// hog maps and touches mib MiB of anonymous memory, one MiB at a time,
// reporting every 4 MiB: a memory limit stops it (the OOM killer), nothing
// else does.
func hog(mib int) {
	for i := 1; i <= mib; i++ {
		b, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			fmt.Printf("hog_error=%s\n", unix.ErrnoName(err.(syscall.Errno)))
			return
		}
		for p := 0; p < len(b); p += 4096 {
			b[p] = 1
		}
		if i%4 == 0 {
			fmt.Printf("hog_mib=%d\n", i)
		}
	}
	fmt.Printf("hog_done=%d\n", mib)
}

// forks forks up to n children that wait for a signal, stopping at the
// first refused fork: a pids limit refuses with EAGAIN. The children stay
// until the domain is destroyed.
func forks(n int) {
	// No new runtime threads while forking: a thread is a task too.
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(-1)
	made, errno := 0, syscall.Errno(0)
	for made < n {
		pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if e != 0 {
			errno = e
			break
		}
		if pid == 0 {
			for {
				unix.RawSyscall(unix.SYS_PAUSE, 0, 0, 0)
			}
		}
		made++
	}
	name := "none"
	if errno != 0 {
		name = unix.ErrnoName(errno)
	}
	fmt.Printf("forks=%d fork_err=%s\n", made, name)
}

// spin busies every CPU the runtime sees for ms milliseconds of wall time
// and reports the CPU time this process used in that window.
func spin(ms int) {
	var before, after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &before)
	start := time.Now()
	deadline := start.Add(time.Duration(ms) * time.Millisecond)
	done := make(chan struct{})
	n := runtime.GOMAXPROCS(0)
	for g := 0; g < n; g++ {
		go func() {
			x := 0
			for time.Now().Before(deadline) {
				for j := 0; j < 10000; j++ {
					x += j
				}
			}
			_ = x
			done <- struct{}{}
		}()
	}
	for g := 0; g < n; g++ {
		<-done
	}
	wall := time.Since(start)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &after)
	cpu := func(r unix.Rusage) int64 { return r.Utime.Nano()/1000 + r.Stime.Nano()/1000 }
	fmt.Printf("spin_cpu_us=%d spin_wall_us=%d spin_threads=%d\n", cpu(after)-cpu(before), wall.Microseconds(), n)
}

// dial makes one attempt to reach addr ("IP:PORT", a path, or an abstract
// name) and returns the errno: connect for stream sockets, an addressed
// sendto or sendmsg on an unconnected UDP socket.
func dial(how, addr string) syscall.Errno {
	var sa unix.Sockaddr
	family, typ := unix.AF_UNIX, unix.SOCK_STREAM
	switch how {
	case "connect-unix":
		sa = &unix.SockaddrUnix{Name: addr}
	case "connect-abstract":
		sa = &unix.SockaddrUnix{Name: "@" + addr}
	default:
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return syscall.EINVAL
		}
		if ap.Addr().Is4() {
			family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		} else {
			family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		}
		if how != "connect-tcp" {
			typ = unix.SOCK_DGRAM
		}
	}
	fd, err := unix.Socket(family, typ, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(fd)
	switch how {
	case "udp-sendto":
		return errnoOf(unix.Sendto(fd, []byte("probe"), 0, sa))
	case "udp-sendmsg":
		_, err := unix.SendmsgN(fd, []byte("probe"), nil, sa, 0)
		return errnoOf(err)
	}
	return errnoOf(unix.Connect(fd, sa))
}

func httpGet(target string) string {
	c := &http.Client{Timeout: 10 * time.Second}
	url := target
	if path, ok := strings.CutPrefix(target, "unix:"); ok {
		c.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}
		url = "http://relay/probe"
	}
	resp, err := c.Get(url)
	if err != nil {
		return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// loopback proves traffic on the domain's own lo works the way programs
// send it: a connect (or an addressed sendto for UDP) to a listener of this
// process, then a send without an address and a sendmsg without a name.
func loopback(network string) string {
	host := "127.0.0.1:0"
	if strings.HasSuffix(network, "6") {
		host = "[::1]:0"
	}
	var addr net.Addr
	var recv func([]byte) (int, error)
	if strings.HasPrefix(network, "tcp") {
		ln, err := net.Listen(network, host)
		if err != nil {
			return "listen " + err.Error()
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); accepted <- c }()
		addr = ln.Addr()
		recv = func(b []byte) (int, error) {
			c := <-accepted
			if c == nil {
				return 0, io.EOF
			}
			defer c.Close()
			return io.ReadAtLeast(c, b, 6)
		}
	} else {
		pc, err := net.ListenPacket(network, host)
		if err != nil {
			return "listen " + err.Error()
		}
		defer pc.Close()
		addr = pc.LocalAddr()
		recv = func(b []byte) (int, error) {
			n, _, err := pc.ReadFrom(b)
			return n, err
		}
	}
	ap := netip.MustParseAddrPort(addr.String())
	family, typ := unix.AF_INET6, unix.SOCK_STREAM
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if ap.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	if strings.HasPrefix(network, "udp") {
		typ = unix.SOCK_DGRAM
	}
	fd, err := unix.Socket(family, typ, 0)
	if err != nil {
		return "socket " + unix.ErrnoName(errnoOf(err))
	}
	defer unix.Close(fd)
	if typ == unix.SOCK_DGRAM {
		if err := unix.Sendto(fd, []byte("udp"), 0, sa); err != nil {
			return "sendto " + unix.ErrnoName(errnoOf(err))
		}
	}
	if err := unix.Connect(fd, sa); err != nil {
		return "connect " + unix.ErrnoName(errnoOf(err))
	}
	if err := unix.Sendto(fd, []byte("abc"), 0, nil); err != nil {
		return "send " + unix.ErrnoName(errnoOf(err))
	}
	if _, err := unix.SendmsgN(fd, []byte("def"), nil, nil, 0); err != nil {
		return "sendmsg " + unix.ErrnoName(errnoOf(err))
	}
	b := make([]byte, 16)
	n, err := recv(b)
	if err != nil || n < 3 {
		return fmt.Sprintf("recv %d %v", n, err)
	}
	return "ok"
}

func sendmmsg(addr string) syscall.Errno {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(fd)
	type sockaddrIn struct {
		family uint16
		port   [2]byte
		addr   [4]byte
		zero   [8]byte
	}
	type mmsghdr struct {
		hdr unix.Msghdr
		n   uint32
		_   [4]byte
	}
	names := [2]sockaddrIn{{family: unix.AF_INET, port: [2]byte{0, 9}, addr: [4]byte{127, 0, 0, 1}}}
	ap := netip.MustParseAddrPort(addr)
	names[1] = sockaddrIn{family: unix.AF_INET, port: [2]byte{byte(ap.Port() >> 8), byte(ap.Port())}, addr: ap.Addr().As4()}
	payload := []byte("probe")
	iov := unix.Iovec{Base: &payload[0]}
	iov.SetLen(len(payload))
	var msgs [2]mmsghdr
	for i := range msgs {
		msgs[i].hdr = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&names[i])), Namelen: 16, Iov: &iov, Iovlen: 1}
	}
	_, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), 2, 0, 0, 0)
	return e
}

func sendmmsgLoop(ms int) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		fmt.Printf("sendmmsg-loop=%v\n", err)
		return
	}
	defer unix.Close(fd)
	type mmsghdr struct {
		hdr unix.Msghdr
		n   uint32
		_   [4]byte
	}
	name := [16]byte{byte(unix.AF_INET), 0, 0, 9, 127, 0, 0, 1}
	payload := []byte("probe")
	iov := unix.Iovec{Base: &payload[0]}
	iov.SetLen(len(payload))
	var msgs [64]mmsghdr
	for i := range msgs {
		msgs[i].hdr = unix.Msghdr{Name: &name[0], Namelen: 16, Iov: &iov, Iovlen: 1}
	}
	calls, failed := 0, 0
	for end := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(end); calls++ {
		if _, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), 64, 0, 0, 0); e != 0 && e != unix.ECONNREFUSED {
			failed++
		}
	}
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	fmt.Printf("sendmmsg-loop=%d failed=%d cpu_us=%d\n", calls, failed, ru.Utime.Nano()/1000+ru.Stime.Nano()/1000)
}

func connectLoop(n int) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Printf("connect-loop=%v\n", err)
		return
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	start := time.Now()
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(fd, sa)
			unix.Close(fd)
		}
		if err != nil {
			fmt.Printf("connect-loop=%v\n", err)
			return
		}
	}
	fmt.Printf("connect-loop_ns=%d\n", time.Since(start).Nanoseconds()/int64(max(n, 1)))
}
