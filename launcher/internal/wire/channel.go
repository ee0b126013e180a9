package wire

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
	"golang.org/x/sys/unix"
)

// Spec is what the monitor tells the domain init, alongside the mount
// descriptors it passes with SCM_RIGHTS (see mountFds).
type Spec struct {
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Cwd      string   `json:"cwd"`
	UID      uint32   `json:"uid"`
	GID      uint32   `json:"gid"`
	IDs      uint32   `json:"ids"` // the size of the domain's id range
	TmpBytes uint64   `json:"tmp_bytes"`
	Floor    []byte   `json:"floor"`
	Profile  []byte   `json:"profile,omitempty"`
	Notify   bool     `json:"notify"`
	Sockets  []string `json:"sockets,omitempty"` // names under /run/autonomic, in descriptor order from fdSockets
}

// Order of the descriptors sent to init.
const (
	FdRootfs = iota
	FdLower
	FdLayers // the domain directory, holding upper/ and work/
	FdSockets
)

// Reply is what init and the worker stage send back on their channels.
type Reply struct {
	Ready    bool   `json:"ready,omitempty"`
	Error    string `json:"error,omitempty"`
	Exited   bool   `json:"exited,omitempty"`
	Code     int    `json:"code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	MaxRSS   int64  `json:"max_rss,omitempty"` // KiB, from the worker's own rusage
	Listener bool   `json:"listener,omitempty"`
	// Violation is the notifier's report of one refused call.
	Violation *protocol.Violation `json:"violation,omitempty"`
}

// ErrDeadline is a receive that timed out.
var ErrDeadline = errors.New("deadline")

func Pair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeLauncherFailed, "socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "ctl"), os.NewFile(uintptr(fds[1]), "ctl"), nil
}

// Send sends one JSON message with descriptors attached.
func Send(f *os.File, b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return unix.Sendmsg(int(f.Fd()), b, oob, nil, 0)
}

func SendReply(f *os.File, r Reply, fds []int) error {
	b, _ := json.Marshal(r)
	return Send(f, b, fds)
}

// Recv receives one message; io.EOF when the peer closed. Every received
// descriptor is returned, so none can leak into a later stage unnoticed.
func Recv(f *os.File, deadline time.Time) (Reply, []int, error) {
	var r Reply
	b, fds, err := RecvRaw(f, deadline)
	if err != nil {
		return r, nil, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return r, nil, err
	}
	return r, fds, nil
}

func RecvRaw(f *os.File, deadline time.Time) ([]byte, []int, error) {
	return RecvSized(f, deadline, 4096)
}

// RecvSized receives one message of at most max bytes (init's spec carries
// the seccomp programs; everything else is small). The deadline is the
// socket's receive timeout; a zero deadline blocks until the peer speaks or
// closes (io.EOF).
func RecvSized(f *os.File, deadline time.Time, max int) ([]byte, []int, error) {
	fd := int(f.Fd())
	var tv unix.Timeval
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil, ErrDeadline
		}
		tv = unix.NsecToTimeval(left.Nanoseconds())
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, nil, err
	}
	buf, oob := make([]byte, max), make([]byte, unix.CmsgSpace(8*4))
	n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	for err == unix.EINTR {
		n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	switch {
	case err == unix.EAGAIN:
		return nil, nil, ErrDeadline
	case err != nil:
		return nil, nil, err
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		return nil, nil, errors.New("message truncated")
	case n == 0 && oobn == 0:
		return nil, nil, io.EOF
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, nil, err
	}
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return buf[:n], fds, nil
}
