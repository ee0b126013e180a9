package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// Binding ties a socket to an episode and to the domain generation now
// running it.
type Binding struct {
	EpisodeID uuid.UUID
	// Cgroup returns the cgroup v2 path (as /proc/<pid>/cgroup names it,
	// e.g. "/autonomic/ep-1-g2") of the episode's current domain
	// generation, or false while no generation runs. It is consulted on
	// every accept and before every later request on a held connection,
	// so a repair that replaces the generation cuts off the old one at
	// once.
	Cgroup func() (string, bool)
	// KernelOnly are the (kind, target) pairs the worker may not propose
	// on this socket: effects the kernel makes on the episode's behalf
	// (a harvest's git_commit), which a worker proposing them itself
	// would pre-empt — its own patch and message, outside the harvest's
	// rules. Refused at prepare, before anything is recorded.
	KernelOnly []KindTarget
}

// KindTarget names an effect kind on one configured target.
type KindTarget struct {
	Kind, TargetID string
}

// kernelOnly reports whether the worker may not propose kind on target.
func (b Binding) kernelOnly(kind, target string) bool {
	for _, kt := range b.KernelOnly {
		if kt.Kind == kind && kt.TargetID == target {
			return true
		}
	}
	return false
}

// Server serves the worker protocol for one episode on one socket.
type Server struct {
	Broker  *Broker
	Binding Binding
	// Concurrency is effect_concurrency: connections served at once
	// (default 8), held ones included. The next is refused at once.
	Concurrency int
	// IdleTimeout bounds the wait for a request's first byte (on a held
	// connection, for the next request), ReadTimeout the whole request
	// frame, WriteTimeout the answer, RequestTimeout the broker's work
	// (defaults 5 s, 10 s, 5 s, 60 s), each per request.
	IdleTimeout, ReadTimeout, WriteTimeout, RequestTimeout time.Duration
	// BindWait bounds how long a connection waits for the episode's
	// generation to be bound (default 10 s): the worker runs as soon as
	// its execve succeeds, before the kernel has heard that its domain
	// started and checked what it was restored from, so its first call
	// can arrive first. It is held, never served early.
	BindWait time.Duration

	slots chan struct{}
	wg    sync.WaitGroup
}

// Listen creates the episode's socket at path, mode 0660, owned by uid:gid
// (the kernel's account). The launcher binds it into the domain read-only
// with the owner mapped to the domain's nobody and the group to the
// worker's, so the worker connects through the group bit and cannot chmod
// it. The directory must exist and be reachable by nobody else; a leftover
// socket there is replaced, any other file is refused.
func Listen(path string, uid, gid int) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("broker: %s exists and is not a socket", filepath.Base(path))
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	// The directory keeps everyone else out until the mode is final.
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func (s *Server) defaults() {
	if s.Concurrency <= 0 {
		s.Concurrency = 8
	}
	for _, d := range []*time.Duration{&s.IdleTimeout, &s.WriteTimeout} {
		if *d <= 0 {
			*d = 5 * time.Second
		}
	}
	if s.ReadTimeout <= 0 {
		s.ReadTimeout = 10 * time.Second
	}
	if s.RequestTimeout <= 0 {
		s.RequestTimeout = 60 * time.Second
	}
	if s.BindWait <= 0 {
		s.BindWait = 10 * time.Second
	}
}

// Serve accepts until ctx ends or ln fails, then waits for the connections
// it is serving.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	s.defaults()
	s.slots = make(chan struct{}, s.Concurrency)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer s.wg.Wait()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		select {
		case s.slots <- struct{}{}:
		default:
			// Refused at once: the answer fits the socket buffer, so this
			// write does not wait on the peer.
			s.Broker.saturated.Add(1)
			s.refuse(c, protocol.E(protocol.CodeEffectBrokerSaturated))
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.serve(ctx, c)
		}()
	}
}

func (s *Server) refuse(c *net.UnixConn, e *protocol.Error) {
	s.answer(c, &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, Error: e})
	c.Close()
}

// answer writes one answer frame under the write deadline. An error means
// the frame may be half written, so the connection can carry nothing more.
func (s *Server) answer(c *net.UnixConn, r *protocol.WorkerResponse) error {
	b, err := protocol.Encode(r)
	if err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
	return protocol.WriteFrame(c, b, protocol.WorkerResponseMax)
}

func (s *Server) fail(c *net.UnixConn, err error) {
	_ = s.answer(c, &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, Error: protocol.AsWire(err)})
}

// serve checks the peer once, then answers its requests one after another
// until it closes, stays idle past IdleTimeout, sends what does not decode,
// or is no longer the bound generation. Each request gets its own idle,
// read and request deadlines; nothing is kept from one request to the
// next but the reader's fixed buffer and the cgroup found at accept.
func (s *Server) serve(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := s.checkPeer(ctx, c)
	if err != nil {
		s.Broker.log.Warn("peer refused", "episode", s.Binding.EpisodeID, "reason", err)
		s.fail(c, err)
		return
	}
	// Shutdown interrupts the wait for a next request; a request already
	// read is finished (its context ends with ctx) and answered.
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReaderSize(c, 4096)
	for first := true; ; first = false {
		if !s.serveOne(ctx, c, br, peer, first) {
			return
		}
	}
}

// serveOne reads and answers one request; false means the connection is
// done.
func (s *Server) serveOne(ctx context.Context, c *net.UnixConn, br *bufio.Reader, peer string, first bool) bool {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(s.IdleTimeout))
	if ctx.Err() != nil {
		return false
	}
	if _, err := br.Peek(1); err != nil {
		// A held connection that goes quiet (or is closed by its client)
		// between requests is closed without an answer: there is no
		// request to answer, and an unasked frame would be read as the
		// answer to the client's next one.
		if first && ctx.Err() == nil {
			s.fail(c, protocol.E(protocol.CodeFrameTimeout))
		}
		return false
	}
	// The connection was bound to a generation at accept; a repair that
	// binds another since cuts it off here, before its frame is read.
	if !first {
		if err := s.stillBound(peer); err != nil {
			s.Broker.log.Warn("peer refused", "episode", s.Binding.EpisodeID, "reason", err)
			s.fail(c, err)
			return false
		}
	}
	_ = c.SetReadDeadline(start.Add(s.ReadTimeout))
	frame, err := protocol.ReadFrame(br, protocol.WorkerRequestMax, time.Time{})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = protocol.E(protocol.CodeFrameTimeout)
		}
		s.fail(c, err)
		return false
	}
	req, err := protocol.DecodeWorkerRequest(frame)
	if err != nil {
		s.fail(c, err)
		return false
	}
	var resp *protocol.WorkerResponse
	if req.Action == protocol.WorkerPrepare && s.Binding.kernelOnly(req.Kind, req.TargetID) {
		s.Broker.log.Warn("worker proposed a kernel-only effect", "episode", s.Binding.EpisodeID, "kind", req.Kind, "target", req.TargetID)
		resp = &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, RequestID: req.RequestID,
			Error: protocol.AsWire(protocol.Errorf(protocol.CodeForbidden, "kernel-only effect"))}
	} else {
		rctx, cancel := context.WithTimeout(ctx, s.RequestTimeout)
		resp = s.Broker.Handle(rctx, s.Binding.EpisodeID, req)
		cancel()
	}
	// A client that sends without reading fills the socket's buffer; the
	// write deadline then ends the connection, so what a connection holds
	// is the kernel's socket buffer and one answer, however many frames
	// it pipelines.
	return s.answer(c, resp) == nil && ctx.Err() == nil
}

// checkPeer binds the connection to the episode's current domain: the
// peer's cgroup (see peerCgroup) must be the bound generation's or below it.
// It returns the peer's cgroup, against which later requests on the
// connection are checked (see stillBound).
func (s *Server) checkPeer(ctx context.Context, c *net.UnixConn) (string, error) {
	want, ok := s.bound(ctx)
	if !ok {
		return "", protocol.Errorf(protocol.CodePeerRefused, "no live domain generation")
	}
	pid, got, err := peerCgroup(c)
	if err != nil {
		return "", err
	}
	if !within(got, want) {
		return "", protocol.Errorf(protocol.CodePeerRefused, "peer pid %d in cgroup %q", pid, got)
	}
	return got, nil
}

// stillBound re-checks, for a later request on a connection, that the
// cgroup its peer was identified in at accept is still within the bound
// generation: the connection stays bound to the generation that opened it,
// so once a repair binds another, the old one's held connections are cut
// off as its new connections are. No /proc read: what is checked is the
// accept-time identity against the current binding. It does not wait for a
// binding (BindWait is for a new generation's first call).
func (s *Server) stillBound(peer string) error {
	want, ok := s.Binding.Cgroup()
	if !ok || !strings.HasPrefix(want, "/") {
		return protocol.Errorf(protocol.CodePeerRefused, "no live domain generation")
	}
	if !within(peer, want) {
		return protocol.Errorf(protocol.CodePeerRefused, "peer's cgroup %q is no longer the bound generation", peer)
	}
	return nil
}

// within: cgroup got is want or a descendant of it (a path ancestor, not a
// string prefix).
func within(got, want string) bool {
	return got == want || strings.HasPrefix(got, want+"/")
}

// peerFallback forces the path for kernels without SO_PEERPIDFD (tests);
// peerHook, when set, runs at the named steps of peerCgroup (tests).
var (
	peerFallback bool
	peerHook     func(step string, pid int)
	peerClock    = bootTicks
)

// peerCgroup reads the peer's pid and cgroup as the kernel knows them,
// never as a frame claims them. The pid comes from SO_PEERCRED (recorded
// at connect), the cgroup from /proc/<pid>/cgroup; what proves the pid was
// not recycled between the two is a pidfd that is still alive after the
// read, since a pid cannot be reused while a process holding it exists.
// The pidfd is SO_PEERPIDFD (Linux ≥ 6.5), which names the connecting
// process itself. Where the kernel lacks it (ENOPROTOOPT: Debian 12's 6.1),
// pidfd_open on the pid stands in, and the pid's start time (read before
// and after the cgroup, and not after the connection was accepted) ties
// that pidfd to the process that was there at connect.
func peerCgroup(c *net.UnixConn) (int, string, error) {
	accepted := peerClock()
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, "", protocol.Errorf(protocol.CodePeerRefused, "%w", err)
	}
	var cred *unix.Ucred
	pidfd := -1
	var serr, perr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil && !peerFallback {
			pidfd, perr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		}
	}); err != nil || serr != nil {
		return 0, "", protocol.Errorf(protocol.CodePeerRefused, "peer credentials: %v %v", err, serr)
	}
	if cred.Pid <= 0 {
		return 0, "", protocol.Errorf(protocol.CodePeerRefused, "peer has no pid in our namespace")
	}
	pid := int(cred.Pid)
	fallback := peerFallback || errors.Is(perr, unix.ENOPROTOOPT)
	if perr != nil && !fallback {
		return 0, "", protocol.Errorf(protocol.CodePeerRefused, "peer pidfd: %v", perr)
	}
	if peerHook != nil {
		peerHook("credentials", pid)
	}
	var started uint64
	if fallback {
		if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
			return 0, "", protocol.Errorf(protocol.CodePeerRefused, "peer exited before identification: %v", err)
		}
		if started, err = startTicks(pid); err != nil || started > accepted {
			unix.Close(pidfd)
			return 0, "", protocol.Errorf(protocol.CodePeerRefused, "pid %d is not the connecting process", pid)
		}
	}
	defer unix.Close(pidfd)
	got, err := cgroupOf(pid)
	if err != nil {
		return 0, "", protocol.Errorf(protocol.CodePeerRefused, "%w", err)
	}
	if peerHook != nil {
		peerHook("cgroup", pid)
	}
	if err := peerAlive(pidfd); err != nil {
		return 0, "", err
	}
	if fallback {
		if again, err := startTicks(pid); err != nil || again != started {
			return 0, "", protocol.Errorf(protocol.CodePeerRefused, "peer exited during identification")
		}
	}
	return pid, got, nil
}

// startTicks is field 22 of /proc/<pid>/stat: when the process started, in
// clock ticks since boot.
func startTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// fields after its last ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat unreadable")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("stat unreadable")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// bootTicks is now, in the clock ticks (USER_HZ, 100 on Linux) /proc
// counts start times in, since boot; rounded up so that a process started
// in this tick is not taken for a later one.
func bootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return ^uint64(0)
	}
	return uint64(ts.Sec)*100 + uint64(ts.Nsec)/1e7 + 1
}

// bound is the current generation's cgroup, waiting up to BindWait for
// one to be bound. A peer is compared only with a bound generation, so a
// wait admits nobody: a process of an older generation is refused once the
// new one is bound, and everyone is refused if none is.
func (s *Server) bound(ctx context.Context) (string, bool) {
	began := time.Now()
	deadline := began.Add(s.BindWait)
	for {
		want, ok := s.Binding.Cgroup()
		if ok && strings.HasPrefix(want, "/") {
			if waited := time.Since(began); waited > 5*time.Millisecond {
				s.Broker.log.Debug("peer waited for its generation to be bound", "episode", s.Binding.EpisodeID, "ms", waited.Milliseconds())
			}
			return want, true
		}
		if !time.Now().Before(deadline) {
			return "", false
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// peerAlive sends signal 0 through the pidfd. EPERM means the process
// exists but is not ours to signal — the kernel runs as its service account
// and the worker under a uid of the domain's pool — so only ESRCH (or any
// other failure) means it is gone.
func peerAlive(pidfd int) error {
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return protocol.Errorf(protocol.CodePeerRefused, "peer exited during identification")
	}
	return nil
}

// cgroupOf reads the cgroup v2 path of pid. It runs on every connection:
// open, read, close and nothing else (os.ReadFile would stat the file and
// try to register it with the poller first).
func cgroupOf(pid int) (string, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var buf [8192]byte
	n := 0
	for n < len(buf) {
		r, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if r == 0 {
			break
		}
		n += r
	}
	if n == len(buf) {
		return "", errors.New("cgroup list too long")
	}
	for line := range bytes.SplitSeq(buf[:n], []byte("\n")) {
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			return string(p), nil
		}
	}
	return "", errors.New("no cgroup v2 entry")
}
