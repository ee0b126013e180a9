package relay

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/internal/connlimit"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
)

// Ledger is the durable budget and call record the relay needs
// (*store.Postgres).
type Ledger interface {
	SetRelayBudget(ctx context.Context, episodeID uuid.UUID, maxTokens, maxSpend int64) (store.RelayBudget, error)
	ChargeRelay(ctx context.Context, episodeID uuid.UUID, min, want store.RelayAmount, force bool) (store.RelayAmount, store.RelayBudget, error)
	ReleaseRelay(ctx context.Context, episodeID uuid.UUID, a store.RelayAmount) (store.RelayBudget, error)
	RecordRelayCall(ctx context.Context, r store.RelayRecord) (uuid.UUID, error)
	RecordRelayRefusal(ctx context.Context, r store.RelayRefusal) error
}

// maxRecordedRefusals bounds the inference_refused events one relay
// writes: each is a transaction on the shared store, and a worker opening
// connections to be refused must not be able to load it. The last one
// recorded says so; later refusals are only logged.
const maxRecordedRefusals = 256

// Exhausted is what the relay signals when an episode's budget runs out.
type Exhausted struct {
	EpisodeID uuid.UUID
	Provider  string
}

// Options configure one episode's relay.
type Options struct {
	// ProviderName and Provider come from the kernel configuration
	// (inference.providers), already validated by config.Load.
	ProviderName string
	Provider     config.Provider
	EpisodeID    uuid.UUID
	// Memory is the kernel-wide bound on what calls hold (one Memory for
	// every relay the kernel serves); nil: a bound of this relay's own.
	Memory *Memory
	// Budget is the episode's signed policy's inference section; nil
	// grants no inference (every call is refused with model_refused).
	Budget *policy.Inference
	Ledger Ledger
	// OnExhausted is called once per relay, the first time a call is
	// refused for the budget or a settlement uses it up (the lead wires it
	// to the homeostat). It must not block.
	OnExhausted func(Exhausted)
	Log         hclog.Logger
	// MaxConcurrent bounds calls in flight (default 8); more are refused
	// with rate_limited.
	MaxConcurrent int
	// Getenv reads the kernel's environment (default os.Getenv).
	Getenv func(string) string
	// ReadTimeout bounds reading one request, body included (default 2
	// min); IdleTimeout closes a kept-alive connection left idle (default
	// 30 s).
	ReadTimeout, IdleTimeout time.Duration
}

// Relay is one episode's inference relay.
type Relay struct {
	opts     Options
	rules    rules
	upstream string // base URL without trailing /
	authKey  string // header name, "" for a keyless upstream
	authVal  string
	client   *http.Client
	sem      chan struct{}
	srv      *http.Server
	once     sync.Once
	// settling counts settlements still writing: they run after the
	// worker has its answer, and Close waits for them.
	settling sync.WaitGroup
	mu       sync.Mutex
	closed   bool // no new asynchronous settlement once Close waits
	refusals int  // inference_refused events taken, under mu

	// pool is budget this relay has durably charged to the episode and
	// not yet set aside for a call. Admission takes a call's reservation
	// from it without a database round trip; when it runs short the relay
	// charges a block (an eighth of the limits, at least the call's need)
	// before forwarding, so every call in flight and every token used is
	// always covered by a durable charge. A settled call's unused part
	// returns to the pool; Close gives the pool back. A kernel that dies
	// leaves its pool charged: at most one block, erring on the safe side.
	poolMu sync.Mutex
	pool   store.RelayAmount
	block  store.RelayAmount
}

// New resolves the provider's credential and records the episode's budget
// limits (a restart keeps the charge). It fails when the credential cannot
// be read safely.
func New(ctx context.Context, opts Options) (*Relay, error) {
	p := opts.Provider
	if _, ok := config.InferenceRoutes[p.WireAPI]; !ok || p.Upstream == "" || opts.Ledger == nil || opts.EpisodeID == uuid.Nil {
		return nil, protocol.Errorf(protocol.CodeConfigInvalid, "relay: incomplete options")
	}
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	opts.Log = opts.Log.Named("relay").With("episode", opts.EpisodeID.String(), "provider", opts.ProviderName)
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 8
	}
	if opts.Memory == nil {
		opts.Memory = NewMemory(DefaultMemory)
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	r := &Relay{opts: opts, upstream: strings.TrimSuffix(p.Upstream, "/"), sem: make(chan struct{}, opts.MaxConcurrent)}
	key, err := credential(p, opts.Getenv)
	if err != nil {
		return nil, err
	}
	if key != "" {
		if p.WireAPI == config.WireMessages {
			r.authKey, r.authVal = "X-Api-Key", key
		} else {
			r.authKey, r.authVal = "Authorization", "Bearer "+key
		}
	}
	r.rules = rules{routes: map[string]bool{}, models: map[string]bool{}, maxBody: p.MaxRequestBytes, maxQuery: 1024}
	if r.rules.maxBody <= 0 {
		r.rules.maxBody = config.DefaultRelayMaxRequestBytes
	}
	routes := p.Routes
	if len(routes) == 0 {
		routes = []string{config.InferenceRoutes[p.WireAPI]}
	}
	for _, rt := range routes {
		r.rules.routes[rt] = true
	}
	for _, m := range p.Models {
		if opts.Budget.Allows(m) {
			r.rules.models[m] = true
		}
	}
	if opts.Budget != nil {
		r.block = store.RelayAmount{Tokens: max(opts.Budget.MaxTokens/8, 1), Spend: opts.Budget.MaxSpendMicroUSD / 8}
		if _, err := opts.Ledger.SetRelayBudget(ctx, opts.EpisodeID, opts.Budget.MaxTokens, opts.Budget.MaxSpendMicroUSD); err != nil {
			return nil, err
		}
	}
	headerTimeout := time.Duration(p.HeaderTimeoutMS) * time.Millisecond
	if headerTimeout <= 0 {
		headerTimeout = config.DefaultRelayHeaderTimeoutMS * time.Millisecond
	}
	r.client = &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // never an ambient proxy: the upstream is configuration
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   opts.MaxConcurrent,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: headerTimeout,
			// Identity bodies: usage is read from the bytes as they pass.
			DisableCompression: true,
		},
		// A redirect is answered as it is, never followed: the key goes
		// to the configured upstream and nowhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	// Bounded connections: a body must arrive within ReadTimeout (a
	// trickled body cannot hold a slot for ever), an idle keep-alive
	// connection is closed, and Serve keeps at most maxConns open.
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cmp.Or(opts.ReadTimeout, defaultReadTimeout), IdleTimeout: cmp.Or(opts.IdleTimeout, defaultIdleTimeout),
		MaxHeaderBytes: 64 << 10, ErrorLog: opts.Log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})}
	return r, nil
}

// credential reads the provider's key: from the kernel's environment, or
// from a regular file owned by this process's user and readable by no one
// else. The key is never part of an error.
func credential(p config.Provider, getenv func(string) string) (string, error) {
	var key string
	switch {
	case p.CredentialEnv != "":
		key = getenv(p.CredentialEnv)
		if key == "" {
			return "", protocol.Errorf(protocol.CodeConfigInvalid, "relay: credential variable %s is empty", p.CredentialEnv)
		}
	case p.CredentialFile != "":
		f, err := os.Open(p.CredentialFile)
		if err != nil {
			return "", protocol.Errorf(protocol.CodeConfigInvalid, "relay: credential file: %v", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return "", protocol.Errorf(protocol.CodeConfigInvalid, "relay: credential file: %v", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 || !ok || int(st.Uid) != os.Geteuid() || fi.Size() > 16<<10 {
			return "", protocol.Errorf(protocol.CodeConfigInvalid,
				"relay: credential file must be a regular file of at most 16 KiB, owned by this user and readable by no one else")
		}
		b, err := io.ReadAll(io.LimitReader(f, 16<<10))
		if err != nil {
			return "", protocol.Errorf(protocol.CodeConfigInvalid, "relay: credential file: %v", err)
		}
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", protocol.Errorf(protocol.CodeConfigInvalid, "relay: credential file is empty")
		}
	default:
		return "", nil
	}
	if strings.ContainsAny(key, "\r\n\x00") {
		return "", protocol.Errorf(protocol.CodeConfigInvalid, "relay: credential is not a single header value")
	}
	return key, nil
}

// Serve answers the worker's calls on ln (the episode's inference socket)
// until Close.
func (r *Relay) Serve(ln net.Listener) error {
	err := r.srv.Serve(connlimit.Listen(ln, r.opts.maxConns()))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the relay: listeners close and calls in flight are cut
// (their reservations settle as they end).
func (r *Relay) Close() error {
	err := r.srv.Close()
	r.client.CloseIdleConnections()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.settling.Wait()
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	if r.pool != (store.RelayAmount{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, rerr := r.opts.Ledger.ReleaseRelay(ctx, r.opts.EpisodeID, r.pool); rerr != nil {
			r.opts.Log.Error("returning the unused budget failed; it stays charged", "error", rerr)
		} else {
			r.pool = store.RelayAmount{}
		}
	}
	return err
}

// forwardHeaders are the worker's headers an upstream may see; everything
// else (its placeholder key above all) is dropped.
var forwardHeaders = []string{"Content-Type", "Accept", "User-Agent", "Anthropic-Version", "Anthropic-Beta", "Openai-Beta",
	"Originator", "Session_id", "Conversation_id", "X-Client-Request-Id", "Version"}

// returnHeaders are the upstream's headers the worker may see.
var returnHeaders = []string{"Content-Type", "Cache-Control", "Retry-After", "X-Request-Id", "Request-Id", "Openai-Processing-Ms"}

const returnPrefix = "X-Ratelimit-"
const anthropicRatelimit = "Anthropic-Ratelimit-"

// ServeHTTP admits, reserves, forwards and settles one call.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	// Route first, before reading a byte of the body.
	if _, _, err := checkRoute(&r.rules, req.Method, req.RequestURI); err != nil {
		r.deny(w, req, err)
		return
	}
	select {
	case r.sem <- struct{}{}:
		defer func() { <-r.sem }()
	default:
		r.deny(w, req, refuse(protocol.CodeRateLimited, http.StatusTooManyRequests, "too many calls in flight"))
		return
	}
	// What this call may hold in the kernel's heap: its body (the length
	// it declares, or the cap) and the line its usage tracker may keep.
	hold := int64(r.rules.maxBody) + 1
	if req.ContentLength >= 0 && req.ContentLength < hold {
		hold = req.ContentLength
	}
	hold += maxLine
	if !r.opts.Memory.take(hold) {
		r.deny(w, req, refuse(protocol.CodeRateLimited, http.StatusTooManyRequests, "the kernel's relay memory is held by other calls; retry"))
		return
	}
	defer r.opts.Memory.give(hold)
	body, err := io.ReadAll(io.LimitReader(req.Body, int64(r.rules.maxBody)+1))
	if err != nil {
		r.deny(w, req, refuse(protocol.CodeFrameTruncated, http.StatusBadRequest, "body could not be read"))
		return
	}
	c, err := admit(&r.rules, req.Method, req.RequestURI, req.Header, body)
	if err == nil {
		err = bodyPolicy(body, req.Header, r.opts.Budget)
		if ref, ok := err.(*Refusal); ok {
			ref.Model = c.model
		}
	}
	if err != nil {
		r.deny(w, req, err)
		return
	}
	sum := sha256.Sum256(body)
	reqDigest := "sha256:" + hex.EncodeToString(sum[:])
	price := r.opts.Provider.Prices[c.model]
	outCap := c.maxOutput
	if outCap == 0 {
		outCap = int64(r.opts.Provider.MaxOutputTokens)
		if outCap <= 0 {
			outCap = config.DefaultRelayMaxOutputTokens
		}
	}
	// The provider is held to the cap reserved for: a request without
	// one gets the provider's, so no answer can outgrow its reservation;
	// a chat stream is made to report its usage.
	if body, err = boundBody(body, r.opts.Provider.WireAPI, c, outCap); err != nil {
		r.deny(w, req, err)
		return
	}
	sum = sha256.Sum256(body)
	reqDigest = "sha256:" + hex.EncodeToString(sum[:])
	// Pessimistic: every byte of the body a token (an upper bound for
	// text under byte-level tokenizers), and the whole output cap.
	inEst := int64(len(body))
	res := store.RelayAmount{Tokens: inEst + outCap, Spend: spend(price, inEst, outCap)}
	if err := r.take(req.Context(), res); err != nil {
		if errors.Is(err, protocol.E(protocol.CodeBudgetExhausted)) {
			r.exhausted()
			r.refuse(w, refuse(protocol.CodeBudgetExhausted, http.StatusForbidden, "budget exhausted"))
			return
		}
		r.opts.Log.Error("reservation failed", "error", err)
		wire := protocol.AsWire(err)
		r.refuse(w, refuse(wire.Code, http.StatusServiceUnavailable, "reservation failed"))
		return
	}
	out := r.forward(w, req, c, body)
	out.start, out.end, out.reqDigest = start, time.Now(), reqDigest
	// The unused part of the reservation goes back to the pool at once,
	// before the next call on this connection is admitted.
	charged := r.charged(res, price, out, outCap)
	// The worker's answer ends when this handler returns; the ledger
	// write must not delay it (nor a stream's end).
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.record(res, charged, c, out)
		return
	}
	r.settling.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.settling.Done()
		r.record(res, charged, c, out)
	}()
}

// outcome is what a forwarded call produced, for the ledger.
type outcome struct {
	status     int
	usage      usage
	notSent    bool // the upstream was provably never reached
	respDigest string
	firstByte  time.Duration
	start, end time.Time
	reqDigest  string
}

func (r *Relay) forward(w http.ResponseWriter, req *http.Request, c call, body []byte) outcome {
	target := r.upstream + c.route
	if c.rawQuery != "" {
		target += "?" + c.rawQuery
	}
	up, err := http.NewRequestWithContext(req.Context(), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		r.refuse(w, refuse(protocol.CodeInternal, http.StatusInternalServerError, "request could not be built"))
		return outcome{status: http.StatusInternalServerError, notSent: true}
	}
	for _, h := range forwardHeaders {
		if v := req.Header.Values(h); len(v) > 0 {
			up.Header[h] = v
		}
	}
	if r.opts.Provider.WireAPI == config.WireMessages && up.Header.Get("Anthropic-Version") == "" {
		up.Header.Set("Anthropic-Version", "2023-06-01")
	}
	if r.authKey != "" {
		up.Header.Set(r.authKey, r.authVal)
	}
	sent := time.Now()
	resp, err := r.client.Do(up)
	if err != nil {
		var op *net.OpError
		notSent := errors.As(err, &op) && op.Op == "dial"
		code, status := protocol.CodeTargetUnavailable, http.StatusBadGateway
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && !notSent {
			code, status = protocol.CodeTargetTimeout, http.StatusGatewayTimeout
		}
		r.opts.Log.Warn("upstream failed", "route", c.route, "model", c.model, "not_sent", notSent, "error", redact(err))
		r.refuse(w, refuse(code, status, "upstream failed"))
		return outcome{status: status, notSent: notSent}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		// The upstream's own error text never reaches the worker: a
		// gateway that reflects the request's headers would show it the
		// key. The relay answers with the provider's status and the error's
		// type and code, each a short token, and a message of its own.
		b := upstreamError(resp)
		for _, h := range []string{"Retry-After", "X-Request-Id", "Request-Id"} {
			if v := resp.Header.Get(h); v != "" && !strings.ContainsAny(v, "\r\n") && len(v) <= 128 {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
		return outcome{status: resp.StatusCode}
	}
	for _, h := range returnHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			w.Header()[h] = v
		}
	}
	for h, v := range resp.Header {
		if strings.HasPrefix(h, returnPrefix) || strings.HasPrefix(h, anthropicRatelimit) {
			w.Header()[h] = v
		}
	}
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	tr := &tracker{wire: r.opts.Provider.WireAPI, sse: sse}
	h := sha256.New()
	firstByte := pump(w, resp.Body, tr, h)
	o := outcome{status: resp.StatusCode, respDigest: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	if !firstByte.IsZero() {
		o.firstByte = firstByte.Sub(sent)
	}
	if resp.StatusCode == http.StatusOK {
		o.usage = tr.finish()
	}
	return o
}

// pump copies the upstream's body to the worker chunk by chunk, flushing
// each before reading the next, and feeds the usage tracker and the
// digest. It returns when the first byte arrived (zero if none).
func pump(w http.ResponseWriter, body io.Reader, tr *tracker, h hash.Hash) time.Time {
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var first time.Time
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if first.IsZero() {
				first = time.Now()
			}
			chunk := buf[:n]
			h.Write(chunk)
			tr.write(chunk)
			if _, werr := w.Write(chunk); werr != nil {
				return first // the worker went away; settle what was seen
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return first
		}
	}
}

// take sets res aside for a call from the pool, charging a block to the
// episode first when the pool is short. Refills are serialised: one
// durable charge at a time.
func (r *Relay) take(ctx context.Context, res store.RelayAmount) error {
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	if r.pool.Tokens >= res.Tokens && r.pool.Spend >= res.Spend {
		r.pool.Tokens -= res.Tokens
		r.pool.Spend -= res.Spend
		return nil
	}
	need := store.RelayAmount{Tokens: max(res.Tokens-r.pool.Tokens, 0), Spend: max(res.Spend-r.pool.Spend, 0)}
	want := store.RelayAmount{Tokens: max(need.Tokens, r.block.Tokens), Spend: max(need.Spend, r.block.Spend)}
	got, _, err := r.opts.Ledger.ChargeRelay(ctx, r.opts.EpisodeID, need, want, false)
	if err != nil {
		return err
	}
	r.pool.Tokens += got.Tokens - res.Tokens
	r.pool.Spend += got.Spend - res.Spend
	return nil
}

// charged settles a call against its reservation: its reported usage (or
// the whole reservation when it reported none, or nothing when it never
// reached the provider). What it did not use returns to the pool; usage
// beyond the reservation is charged durably, whatever the limit.
func (r *Relay) charged(res store.RelayAmount, price config.Price, o outcome, outCap int64) store.RelayAmount {
	u := o.usage
	if o.notSent {
		u = usage{reported: true}
	}
	used := res
	switch {
	case u.reported:
		used = store.RelayAmount{Tokens: u.input + u.output, Spend: spend(price, u.input, u.output)}
	case u.seenInput > 0:
		// Cut before its final usage: the input it reported and the
		// whole output cap, if that is more than was reserved.
		used = store.RelayAmount{Tokens: max(res.Tokens, u.seenInput+outCap), Spend: max(res.Spend, spend(price, u.seenInput, outCap))}
	}
	back := store.RelayAmount{Tokens: max(res.Tokens-used.Tokens, 0), Spend: max(res.Spend-used.Spend, 0)}
	over := store.RelayAmount{Tokens: max(used.Tokens-res.Tokens, 0), Spend: max(used.Spend-res.Spend, 0)}
	r.poolMu.Lock()
	r.pool.Tokens += back.Tokens
	r.pool.Spend += back.Spend
	r.poolMu.Unlock()
	if over != (store.RelayAmount{}) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, b, err := r.opts.Ledger.ChargeRelay(ctx, r.opts.EpisodeID, store.RelayAmount{}, over, true); err != nil {
			r.opts.Log.Error("charging usage beyond the reservation failed", "error", err)
		} else if b.Exhausted {
			r.exhausted()
		}
	}
	return used
}

// record writes the finished call to the ledger; only what is not
// content: route, model, status, counts, digests, timings.
func (r *Relay) record(res, charged store.RelayAmount, c call, o outcome) {
	dur := o.end.Sub(o.start)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.opts.Ledger.RecordRelayCall(ctx, store.RelayRecord{
		EpisodeID: r.opts.EpisodeID, Provider: r.opts.ProviderName, Route: c.route, Model: c.model, RequestDigest: o.reqDigest,
		Reserved: res, Charged: charged, Status: o.status, UsageReported: o.usage.reported || o.notSent,
		InputTokens: o.usage.input, OutputTokens: o.usage.output, ResponseDigest: o.respDigest, FirstByte: o.firstByte, Duration: dur,
	})
	r.opts.Log.Info("inference call", "route", c.route, "model", c.model, "stream", c.stream, "status", o.status,
		"usage_reported", o.usage.reported, "input_tokens", o.usage.input, "output_tokens", o.usage.output,
		"request_digest", o.reqDigest, "response_digest", o.respDigest, "first_byte", o.firstByte, "duration", dur)
	if err != nil {
		r.opts.Log.Error("recording the call failed (its budget was charged before it was forwarded)", "error", err)
	}
}

func (r *Relay) exhausted() {
	r.once.Do(func() {
		r.opts.Log.Warn("inference budget exhausted")
		if r.opts.OnExhausted != nil {
			r.opts.OnExhausted(Exhausted{EpisodeID: r.opts.EpisodeID, Provider: r.opts.ProviderName})
		}
	})
}

// spend prices tokens in micro-USD, rounding up.
func spend(p config.Price, in, out int64) int64 {
	up := func(n, per int64) int64 {
		if n <= 0 || per <= 0 {
			return 0
		}
		// n ≤ 2^53 and per ≤ 2^40 would overflow int64: divide first
		// where it is exact enough to stay pessimistic.
		if n > (1<<62)/per {
			return n/1_000_000*per + per
		}
		return (n*per + 999_999) / 1_000_000
	}
	return up(in, p.InputMicroUSDPerMTok) + up(out, p.OutputMicroUSDPerMTok)
}

// errorBody is understood by OpenAI and Anthropic clients alike: both read
// error.message and error.type.
type errorBody struct {
	Type  string    `json:"type"`
	Error errorInfo `json:"error"`
}

type errorInfo struct {
	Type      string `json:"type"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// deny answers an admission refusal and records it in the episode's ledger
// (an inference_refused event: method, raw path, model, code — never the
// body), before the answer, so a refusal the worker saw is in the ledger.
func (r *Relay) deny(w http.ResponseWriter, req *http.Request, err error) {
	var rf *Refusal
	if errors.As(err, &rf) {
		r.mu.Lock()
		take := r.refusals < maxRecordedRefusals
		if take {
			r.refusals++
		}
		last := r.refusals == maxRecordedRefusals
		r.mu.Unlock()
		if take {
			route, _, _ := strings.Cut(req.RequestURI, "?")
			// A context of its own: a worker that sends a forbidden request
			// and hangs up at once must still leave the refusal recorded.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), 5*time.Second)
			rerr := r.opts.Ledger.RecordRelayRefusal(ctx, store.RelayRefusal{EpisodeID: r.opts.EpisodeID, Provider: r.opts.ProviderName,
				Method: req.Method, Route: route, Model: rf.Model, Code: rf.Code, Status: rf.Status, Last: last})
			cancel()
			if rerr != nil {
				r.opts.Log.Error("recording a refusal failed", "code", rf.Code, "error", rerr)
			}
		}
	}
	r.refuse(w, err)
}

func (r *Relay) refuse(w http.ResponseWriter, err error) {
	var rf *Refusal
	if !errors.As(err, &rf) {
		rf = &Refusal{Code: protocol.CodeInternal, Status: http.StatusInternalServerError, Reason: "internal"}
	}
	e := protocol.E(rf.Code)
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorInfo{Type: string(e.Code), Code: string(e.Code),
		Message: fmt.Sprintf("autonomic relay: %s (%s)", e.Message, rf.Reason), Retryable: e.Retryable}})
	if rf.Code != protocol.CodeBudgetExhausted {
		r.opts.Log.Warn("call refused", "code", rf.Code, "reason", rf.Reason)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(rf.Status)
	w.Write(b)
}

// redact keeps an upstream error's kind without the URL (which names the
// upstream, harmless, but never a key: the key is a header, not in it).
func redact(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		return ue.Unwrap().Error()
	}
	return "request failed"
}
