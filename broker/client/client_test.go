package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/protocol"
)

const effectID = "0190a5c4-3b1e-7c2a-9d4e-1f2a3b4c5d6e"

// peer is a broker stand-in on a real AF_UNIX socket: answer decides each
// answer frame from the request read (nil: close the connection).
type peer struct {
	socket string
	conns  atomic.Int32
	reqs   atomic.Int32
}

func listen(t *testing.T, answer func(req *protocol.WorkerRequest) []byte) *peer {
	t.Helper()
	p := &peer{socket: filepath.Join(t.TempDir(), "b.sock")}
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			go func() {
				defer c.Close()
				for {
					b, err := protocol.ReadFrame(c, protocol.WorkerRequestMax, time.Now().Add(5*time.Second))
					if err != nil {
						return
					}
					p.reqs.Add(1)
					req, err := protocol.DecodeWorkerRequest(b)
					if err != nil {
						return
					}
					out := answer(req)
					if out == nil {
						return
					}
					if protocol.WriteFrame(c, out, protocol.WorkerResponseMax) != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

func encode(t *testing.T, r *protocol.WorkerResponse) []byte {
	b, err := protocol.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func status(id string) *protocol.WorkerRequest {
	return &protocol.WorkerRequest{Protocol: protocol.WorkerVersion, RequestID: id, Epoch: 1, Action: protocol.WorkerStatus, EffectID: effectID}
}

func notFound(t *testing.T) func(*protocol.WorkerRequest) []byte {
	return func(req *protocol.WorkerRequest) []byte {
		return encode(t, &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, RequestID: req.RequestID, Error: protocol.E(protocol.CodeNotFound)})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// A Conn carries its calls on one connection, each answered by its own id;
// Call opens one per request.
func TestConnCarriesSeveralRequests(t *testing.T) {
	p := listen(t, notFound(t))
	c, err := Dial(ctx(t), p.socket)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		id := "r" + strconv.Itoa(i)
		r, err := c.Call(ctx(t), status(id))
		if err != nil || r.RequestID != id || r.Error.Code != protocol.CodeNotFound {
			t.Fatalf("call %d: %v %+v", i, err, r)
		}
	}
	c.Close()
	if _, err := c.Call(ctx(t), status("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	if _, err := Call(ctx(t), p.socket, status("one")); err != nil {
		t.Fatal(err)
	}
	if n := p.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// An invalid request is never sent, and does not end the Conn.
func TestConnValidatesBeforeSending(t *testing.T) {
	p := listen(t, notFound(t))
	c, err := Dial(ctx(t), p.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := status("r1")
	bad.EffectID = "../etc"
	if _, err := c.Call(ctx(t), bad); err == nil {
		t.Fatal("invalid request accepted")
	}
	if _, err := Call(ctx(t), p.socket, bad); err == nil {
		t.Fatal("invalid request accepted by Call")
	}
	if r, err := c.Call(ctx(t), status("r2")); err != nil || r.RequestID != "r2" {
		t.Fatal(err, r)
	}
	if n := p.conns.Load(); n != 1 {
		t.Fatalf("Call connected for an invalid request (%d connections)", n)
	}
	if n := p.reqs.Load(); n != 1 {
		t.Fatalf("the peer read %d requests, want 1", n)
	}
}

// An answer to another request, or one that does not decode, is no answer,
// and the connection carries nothing more; an answer without a request id
// (the broker's refusal at the door, after which it closes) is returned,
// and the Conn is done.
func TestConnRefusesBadAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*protocol.WorkerRequest) []byte
		ok     bool
	}{
		{"another request id", func(*protocol.WorkerRequest) []byte {
			return encode(t, &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, RequestID: "other", Error: protocol.E(protocol.CodeNotFound)})
		}, false},
		{"not json", func(*protocol.WorkerRequest) []byte { return []byte("not json") }, false},
		{"unknown code", func(req *protocol.WorkerRequest) []byte {
			return []byte(`{"protocol":1,"request_id":"` + req.RequestID + `","ok":false,"error":{"code":"made_up","message":"x","retryable":true}}`)
		}, false},
		{"closed without answer", func(*protocol.WorkerRequest) []byte { return nil }, false},
		{"refused at the door", func(*protocol.WorkerRequest) []byte {
			return encode(t, &protocol.WorkerResponse{Protocol: protocol.WorkerVersion, Error: protocol.E(protocol.CodePeerRefused)})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := listen(t, tc.answer)
			c, err := Dial(ctx(t), p.socket)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r, err := c.Call(ctx(t), status("r1"))
			if tc.ok {
				if err != nil || r.Error.Code != protocol.CodePeerRefused {
					t.Fatalf("%v %+v", err, r)
				}
			} else if err == nil {
				t.Fatalf("accepted %+v", r)
			}
			if _, err := c.Call(ctx(t), status("r2")); !errors.Is(err, ErrClosed) {
				t.Fatalf("next call: %v, want ErrClosed", err)
			}
			if n := p.reqs.Load(); n != 1 {
				t.Fatalf("the peer read %d requests, want 1", n)
			}
		})
	}
}
