package episode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/egress"
	"github.com/autonomic-kernel/autonomic/kernel/homeostat"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/relay"
	"github.com/autonomic-kernel/autonomic/kernel/sensor"
	"github.com/autonomic-kernel/autonomic/kernel/supervisor"
	"github.com/autonomic-kernel/autonomic/kernel/verify"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// The episode's services besides the broker: its inference relay
// (kernel/relay) and its egress proxy (kernel/egress), each on its own
// socket under SocketsRoot, bound by the launcher into the domain at
// /run/autonomic/inference.sock and /run/autonomic/egress.sock. Each is a
// supervised child between the broker and the domain, so a relay or proxy
// that dies takes the domain with it (rest for one), and its socket goes
// when the episode stops.

// Seccomp profiles a spec may name (a closed set: each is compiled once,
// by compose). "worker" is the default.
const (
	ProfileWorker = "worker"
	ProfileAgent  = "agent"
)

// EgressConfig is the kernel's egress proxy configuration: the operator's
// egress section (egress.ConfigFor makes each episode's proxy from it and
// the episode's policy), the fetch ledger and the shared cache.
type EgressConfig struct {
	Operator config.Egress
	Ledger   egress.Ledger
	Cache    *egress.Cache
}

// Socket ids under SocketsRoot (the launcher resolves <id>.sock).
func relaySocketID(ep uuid.UUID) string  { return ep.String() + "-inference" }
func egressSocketID(ep uuid.UUID) string { return ep.String() + "-egress" }

func (k *Controller) sockPath(id string) string { return filepath.Join(k.cfg.SocketsRoot, id+".sock") }

// seccompFor is the compiled program of a spec's profile.
func (k *Controller) seccompFor(name string) ([]byte, bool) {
	switch name {
	case "", ProfileWorker:
		return k.cfg.Seccomp, true
	case ProfileAgent:
		p, ok := k.cfg.Profiles[ProfileAgent]
		return p, ok
	}
	return nil, false
}

// checkServices refuses a spec naming what this kernel cannot give: an
// unknown seccomp profile, rootfs name or inference provider.
func (k *Controller) checkServices(spec Spec) error {
	invalid := func(format string, args ...any) error {
		return protocol.Errorf(protocol.CodeInvalidField, format, args...)
	}
	switch {
	case spec.Seccomp != "" && spec.Seccomp != ProfileWorker && spec.Seccomp != ProfileAgent:
		return invalid("seccomp must be %q or %q", ProfileWorker, ProfileAgent)
	case spec.Rootfs != "" && !protocol.ValidID(spec.Rootfs):
		return invalid("rootfs is not a rootfs name")
	}
	if _, ok := k.seccompFor(spec.Seccomp); !ok {
		return invalid("seccomp profile %q is not available in this kernel", spec.Seccomp)
	}
	if spec.Inference != "" {
		if _, ok := k.cfg.Providers[spec.Inference]; !ok {
			return invalid("inference: no provider %q is configured", spec.Inference)
		}
		if k.cfg.RelayLedger == nil {
			return invalid("inference: this kernel has no ledger for the relay")
		}
	}
	return nil
}

// wantsEgress: the policy grants egress and the kernel serves it.
func (e *Episode) wantsEgress() bool {
	return e.pol != nil && e.pol.Egress != nil && e.k.cfg.Egress != nil
}

// services binds the episode's relay and egress sockets (as the broker's:
// 0660, the kernel's account) and returns their supervised children.
func (e *Episode) services() ([]supervisor.Child, error) {
	var out []supervisor.Child
	if e.spec.Inference != "" {
		ln, err := broker.Listen(e.k.sockPath(relaySocketID(e.id)), e.k.cfg.OwnerUID, e.k.cfg.OwnerGID)
		if err != nil {
			return nil, fmt.Errorf("episode: relay socket: %w", err)
		}
		e.mu.Lock()
		e.lns = append(e.lns, ln)
		e.mu.Unlock()
		out = append(out, supervisor.Child{Name: "relay", Run: func(ctx context.Context, ready func()) error {
			var budget *policy.Inference
			if e.pol != nil {
				budget = e.pol.Inference
			}
			r, err := relay.New(ctx, relay.Options{ProviderName: e.spec.Inference, Provider: e.k.cfg.Providers[e.spec.Inference],
				EpisodeID: e.id, Budget: budget, Ledger: e.k.cfg.RelayLedger, Memory: e.k.cfg.RelayMemory, OnExhausted: e.exhausted, Log: e.log})
			if err != nil {
				return fmt.Errorf("relay: %w", err)
			}
			return serveUntil(ctx, ready, func() error { return r.Serve(ln) }, r.Close)
		}})
	}
	if e.wantsEgress() {
		ln, err := broker.Listen(e.k.sockPath(egressSocketID(e.id)), e.k.cfg.OwnerUID, e.k.cfg.OwnerGID)
		if err != nil {
			return nil, fmt.Errorf("episode: egress socket: %w", err)
		}
		e.mu.Lock()
		e.lns = append(e.lns, ln)
		e.mu.Unlock()
		out = append(out, supervisor.Child{Name: "egress", Run: func(ctx context.Context, ready func()) error {
			ec := e.k.cfg.Egress
			c, _, err := egress.ConfigFor(ec.Operator, e.pol, e.id, ec.Ledger, ec.Cache)
			if err != nil {
				return err
			}
			c.OnRefused, c.CA, c.Lock = e.refused, e.ca, e.lock
			p, err := egress.New(c)
			if err != nil {
				return err
			}
			return serveUntil(ctx, ready, func() error { return p.Serve(ln) }, p.Close)
		}})
	}
	return out, nil
}

// verifyEgress is what the verification of this episode's effects gets
// (verify.Egress): a proxy of its own under the episode's policy, in the
// episode's rootfs under its seccomp program. Only for an episode that
// had a proxy it could reach — the agent profile, whose loopback sockets
// the bridge needs; any other verification has no network at all.
func (e *Episode) verifyEgress() *verify.Egress {
	if !e.wantsEgress() || e.spec.Seccomp != ProfileAgent {
		return nil
	}
	prog, ok := e.k.seccompFor(e.spec.Seccomp)
	if !ok {
		return nil
	}
	wrap := func(argv []string) []string { return agent.WithEgressCA(agent.WrapEgress(argv), e.caPEM()) }
	return &verify.Egress{Serve: e.serveEgress, Rootfs: e.spec.Rootfs, Seccomp: prog, Wrap: wrap}
}

// caPEM is the certificate of the episode's egress CA, nil without one.
func (e *Episode) caPEM() []byte {
	if e.ca == nil {
		return nil
	}
	return e.ca.CertPEM()
}

// argv is the worker's argv as the domain runs it: the spec's, with the
// egress CA's certificate and variables handed to autonomic-entry when
// the episode has a proxy (the argv was rendered before the CA existed).
func (e *Episode) argv() []string {
	return agent.WithEgressCA(e.spec.Argv, e.caPEM())
}

// serveEgress serves one more proxy for this episode on socket id (a
// verification's): the same allow list, cap, ledger, cache and refusal
// signal as the episode's own. stop waits until every fetch is recorded
// and removes the socket.
func (e *Episode) serveEgress(_ context.Context, id string) (func() error, error) {
	ec := e.k.cfg.Egress
	c, _, err := egress.ConfigFor(ec.Operator, e.pol, e.id, ec.Ledger, ec.Cache)
	if err != nil {
		return nil, err
	}
	c.OnRefused, c.CA, c.Lock = e.refused, e.ca, e.lock
	p, err := egress.New(c)
	if err != nil {
		return nil, err
	}
	path := e.k.sockPath(id)
	ln, err := broker.Listen(path, e.k.cfg.OwnerUID, e.k.cfg.OwnerGID)
	if err != nil {
		return nil, fmt.Errorf("episode: egress socket: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = p.Serve(ln); close(done) }()
	return func() error {
		err := p.Close()
		<-done
		ln.Close()
		_ = os.Remove(path)
		return err
	}, nil
}

// serveUntil runs serve until ctx ends (then close, and the child was
// stopped) or serve returns (a failure of the child).
func serveUntil(ctx context.Context, ready func(), serve, close func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	ready()
	select {
	case <-ctx.Done():
		close()
		<-errc
		return supervisor.ErrStopped
	case err := <-errc:
		close()
		if err == nil {
			err = errors.New("stopped serving")
		}
		return err
	}
}

// socketIDs are the relay and egress socket ids the domain is given.
func (e *Episode) socketIDs() (relayID, egressID string) {
	if e.spec.Inference != "" {
		relayID = relaySocketID(e.id)
	}
	if e.wantsEgress() {
		egressID = egressSocketID(e.id)
	}
	return
}

// exhausted is the relay's budget signal: resource pressure on the fast
// loop (the homeostat narrows; the relay has already refused the call and
// recorded the exhaustion in the ledger).
func (e *Episode) exhausted(x relay.Exhausted) {
	e.signal(homeostat.Sample{Pressure: 1}, "inference budget exhausted ("+x.Provider+")")
}

// refused is the egress proxy's refusal signal: each refused fetch is
// drift on the fast loop, so a worker hammering refused hosts climbs the
// homeostat's regimes to containment while an occasional one only
// narrows.
func (e *Episode) refused(r egress.Refusal) {
	if r.Code == protocol.CodeEffectBrokerSaturated {
		// Backpressure on the episode's own fetches in flight (npm ci
		// opens dozens of tunnels at once, and retries): recorded in the
		// ledger, but no drift — the worker asked for nothing it may not
		// have, and a refused harvest would punish a tool's parallelism.
		return
	}
	e.signal(homeostat.Sample{Drift: 1}, "egress refused: "+string(r.Code))
}

// signal puts a non-critical frame of the current epoch on the sensor
// queue and remembers it for the sensors. It never blocks.
func (e *Episode) signal(s homeostat.Sample, reason string) {
	e.traj.Remember(sensor.Event{Kind: sensor.EventCapabilityDenied, Detail: reason})
	e.mu.Lock()
	epoch := e.epoch
	e.mu.Unlock()
	_ = e.traj.Observe(epoch, s, reason, false)
}

// closeServices closes the service listeners (their sockets unlink) and
// removes what a crashed kernel may have left.
func (e *Episode) closeServices() {
	e.mu.Lock()
	lns := e.lns
	e.lns = nil
	e.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, id := range []string{relaySocketID(e.id), egressSocketID(e.id)} {
		_ = os.Remove(e.k.sockPath(id))
	}
}
