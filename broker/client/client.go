// Package client is the worker side of the worker protocol
// (protocol/README.md §11): one request per connection over the broker's
// AF_UNIX socket. It holds no authority and imports nothing but protocol,
// so the in-domain autonomic-effect binary stays small and static.
//
// Invariant: the client never sends a request that fails Validate and never
// accepts an answer that fails DecodeWorkerResponse or answers another
// request id.
package client

import (
	"context"
	"net"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// DefaultSocket is where the launcher binds the broker socket in a domain.
const DefaultSocket = "/run/autonomic/effect.sock"

// Call sends req to the broker at socket and returns its answer. A refusal
// by the broker is a response with OK false, not an error; an error means
// there was no valid answer.
func Call(ctx context.Context, socket string, req *protocol.WorkerRequest) (*protocol.WorkerResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	b, err := protocol.Encode(req)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(2 * time.Minute)
	}
	_ = c.SetDeadline(deadline)
	werr := protocol.WriteFrame(c, b, protocol.WorkerRequestMax)
	// The broker answers a refused peer (or a saturated broker) before
	// reading anything, so a failed write may still have an answer.
	frame, err := protocol.ReadFrame(c, protocol.WorkerResponseMax, deadline)
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
	if resp.RequestID != "" && resp.RequestID != req.RequestID {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "answer to another request")
	}
	return resp, nil
}
