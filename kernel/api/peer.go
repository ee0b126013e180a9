package api

import (
	"context"
	"errors"
	"net"
	"os/user"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Peer is who is on the other end of a connection, as the kernel recorded
// it at connect time.
type Peer struct {
	UID, GID uint32
	PID      int32
}

type peerKey struct{}

func peerCred(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, errors.New("api: not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if serr != nil {
		return Peer{}, serr
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// connContext stores the peer's credentials (or their absence) in every
// request context of that connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	p, err := peerCred(c)
	if err != nil {
		return context.WithValue(ctx, peerKey{}, (*Peer)(nil))
	}
	return context.WithValue(ctx, peerKey{}, &p)
}

func peerOf(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// Access decides which peers may use the API.
type Access struct {
	// KernelUID is the kernel's own account.
	KernelUID uint32
	// OperatorGID is the operator group; negative: none.
	OperatorGID int64
}

// allows: the kernel's account, root, or a member of the operator group —
// by the peer's primary gid, or by the account's supplementary groups as
// the host's group database lists them (SO_PEERCRED carries only the
// primary gid).
func (a Access) allows(p *Peer) bool {
	if p == nil {
		return false
	}
	if p.UID == a.KernelUID || p.UID == 0 {
		return true
	}
	if a.OperatorGID < 0 {
		return false
	}
	if int64(p.GID) == a.OperatorGID {
		return true
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(p.UID), 10))
	if err != nil {
		return false
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false
	}
	return slices.Contains(gids, strconv.FormatInt(a.OperatorGID, 10))
}
