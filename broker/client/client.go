// Package client is the worker side of the worker protocol
// (protocol/README.md §11) over the broker's AF_UNIX socket: Call sends one
// request on a connection of its own; a Conn carries several in sequence,
// one outstanding at a time, so a worker that calls often pays the connect
// and the broker's peer check once. It holds no authority and imports
// nothing but protocol, so the in-domain autonomic-effect binary stays
// small and static.
//
// Invariant: the client never sends a request that fails Validate and never
// accepts an answer that fails DecodeWorkerResponse or answers another
// request id.
package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// DefaultSocket is where the launcher binds the broker socket in a domain.
const DefaultSocket = "/run/autonomic/effect.sock"

// ErrClosed is returned by a Conn that can carry no more requests: closed
// by its caller, ended by the broker, or broken by an error.
var ErrClosed = errors.New("broker connection closed")

// Call sends req to the broker at socket on a connection of its own and
// returns its answer. A refusal by the broker is a response with OK false,
// not an error; an error means there was no valid answer.
func Call(ctx context.Context, socket string, req *protocol.WorkerRequest) (*protocol.WorkerResponse, error) {
	// Validated before connecting, so an invalid request costs the broker
	// nothing.
	if err := req.Validate(); err != nil {
		return nil, err
	}
	c, err := Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Call(ctx, req)
}

// Conn is a held connection to the broker. Its calls are serialised: the
// protocol has one outstanding request per connection.
type Conn struct {
	mu   sync.Mutex
	c    net.Conn
	br   *bufio.Reader
	done bool
}

// Dial connects to the broker at socket. The broker identifies the peer at
// accept; a refusal (peer_refused, effect_broker_saturated) is the answer
// to the first Call.
func Dial(ctx context.Context, socket string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	return &Conn{c: c, br: bufio.NewReaderSize(c, 4096)}, nil
}

// Call sends req and returns its answer, as the package-level Call does.
// After an error, or an answer the broker closes the connection after (one
// without a request id: a refused peer, a saturated broker, a frame it
// could not read), the Conn is done and later calls return ErrClosed; dial
// again. The broker also closes a connection left idle past its idle
// deadline (default 5 s): the next call then fails without an answer, and
// the request was never read.
func (c *Conn) Call(ctx context.Context, req *protocol.WorkerRequest) (*protocol.WorkerResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	b, err := protocol.Encode(req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return nil, ErrClosed
	}
	resp, err := c.roundTrip(ctx, req.RequestID, b)
	if err != nil || resp.RequestID == "" {
		c.done = true
		c.c.Close()
	}
	return resp, err
}

func (c *Conn) roundTrip(ctx context.Context, id string, b []byte) (*protocol.WorkerResponse, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(2 * time.Minute)
	}
	_ = c.c.SetDeadline(deadline)
	werr := protocol.WriteFrame(c.c, b, protocol.WorkerRequestMax)
	// The broker answers a refused peer (or a saturated broker) before
	// reading anything, so a failed write may still have an answer.
	frame, err := protocol.ReadFrame(c.br, protocol.WorkerResponseMax, time.Time{})
	if err != nil {
		if werr != nil {
			return nil, werr
		}
		return nil, err
	}
	resp, err := protocol.DecodeWorkerResponse(frame)
	if err != nil {
		return nil, err
	}
	if resp.RequestID != "" && resp.RequestID != id {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "answer to another request")
	}
	return resp, nil
}

// Close closes the connection; the broker then ends its side.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return nil
	}
	c.done = true
	return c.c.Close()
}
