package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/kernel/targets"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/ledger"
)

// Store is what the API reads (and, for abort without a controller, the
// one mutation it makes). *store.Postgres implements it.
type Store interface {
	Episode(ctx context.Context, id uuid.UUID) (store.Episode, error)
	ListEpisodes(ctx context.Context, limit int) ([]store.Episode, error)
	ListEffects(ctx context.Context, episodeID uuid.UUID, limit int) ([]store.Effect, error)
	Effect(ctx context.Context, id uuid.UUID) (store.Effect, error)
	Decisions(ctx context.Context, effectID uuid.UUID) ([]store.Decision, error)
	Events(ctx context.Context, episodeID uuid.UUID) ([]ledger.Entry, error)
	VerifyLedger(ctx context.Context, episodeID uuid.UUID) (ledger.Report, error)
	AcquireOwnership(ctx context.Context, episodeID uuid.UUID) (store.Ownership, error)
	EndEpisode(ctx context.Context, req store.EndEpisode) (store.Episode, error)
	Actions(ctx context.Context, episode uuid.UUID, all bool) ([]store.Action, error)
	Action(ctx context.Context, id uuid.UUID) (store.Action, error)
	SnoozeAction(ctx context.Context, id uuid.UUID, d time.Duration) (store.Action, error)
	DismissAction(ctx context.Context, id uuid.UUID, feedback string) (store.Action, error)
	SubmitTask(ctx context.Context, req store.NewTask) (store.Task, error)
	Task(ctx context.Context, id uuid.UUID) (store.Task, error)
	Tasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error)
	CancelTask(ctx context.Context, id uuid.UUID, who string) (store.Task, error)
	TaskEvents(ctx context.Context, id uuid.UUID) ([]ledger.Entry, error)
	VerifyTaskLedger(ctx context.Context, id uuid.UUID) (ledger.Report, error)
	ProjectBudgets(ctx context.Context) ([]store.ProjectBudget, error)
	ResolveTaskAction(ctx context.Context, id uuid.UUID, allow bool, who string) (store.Action, error)
}

// Controller is the episode controller as the API needs it.
type Controller interface {
	// Start validates spec (strictly) and starts an episode.
	Start(ctx context.Context, spec []byte) (uuid.UUID, error)
	// Check validates spec as Start would, starting nothing, and returns
	// what a task running it reserves at admission.
	Check(ctx context.Context, spec []byte) (store.Reserve, error)
	// Live is the controller's view of an episode it drives.
	Live(id uuid.UUID) (LiveView, bool)
	// Abort ends an episode this controller drives (domain destroyed
	// first); driven is false when it does not drive id.
	Abort(ctx context.Context, id uuid.UUID, reason string) (driven bool, err error)
	// Complete ends an episode this controller drives as completed (the
	// operator accepts its work; domain destroyed first).
	Complete(ctx context.Context, id uuid.UUID, reason string) (driven bool, err error)
}

// Approver records an operator's signed decision on a class 4 effect.
// *broker.Broker implements it (Approve: the kernel runs evaluate's class 4
// step — verification against decision_keys, the decision row, the move to
// ready — so the worker commits without carrying the approval).
type Approver interface {
	Approve(ctx context.Context, effectID uuid.UUID, a *protocol.Approval) (store.Effect, error)
}

// Settler takes an operator's word on an effect whose commit outcome
// nothing can find (*broker.Broker: only commit_unknown, and only when
// the target cannot decide it itself).
type Settler interface {
	Settle(ctx context.Context, id uuid.UUID, committed bool, uid int64, reason string) (store.Effect, error)
}

// Targets is the kernel's live set of git_commit targets
// (*targets.Registry).
type Targets interface {
	List() []targets.Entry
	Add(ctx context.Context, req targets.Request) (targets.Added, error)
}

// Keys is policy_keys as the running kernel holds it (*policy.LiveKeys).
type Keys interface {
	Add(id, pub string) error
	Keys() policy.Keys
}

// Config configures a Server.
type Config struct {
	Store Store
	// Controller may be nil: start then answers 501, abort goes to the
	// store (which fences it by ownership).
	Controller Controller
	// Approver may be nil: approval then answers 501.
	Approver Approver
	// Settler may be nil: settle then answers 501.
	Settler Settler
	// Targets may be nil: the target routes then answer 501.
	Targets Targets
	// Keys may be nil: registering a policy key then answers 501.
	Keys Keys
	// Queue, when set, is woken by a submission or a cancellation.
	Queue interface{ Poke() }
	// Kernel, when set, reports the kernel's autonomy (GET /v1/kernel).
	Kernel func() KernelView
	// Preflight, when set, reports what the host enforces.
	Preflight func(ctx context.Context) (*protocol.PreflightReport, error)
	// Payloads, when set, reads effects' stored payloads (the broker's
	// payload store): GET /v1/effects/{id}/patch.
	Payloads interface {
		Get(digest string, max int64) ([]byte, error)
	}
	Access Access
	// RequestTimeout bounds each request (default 30 s).
	RequestTimeout time.Duration
	Logger         hclog.Logger
}

// Server serves the API.
type Server struct {
	cfg Config
	log hclog.Logger
	mux *http.ServeMux
}

// Limits.
const (
	maxBody          = 1 << 20
	defaultTailLimit = 100
)

// New builds a server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("api: Store is required")
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Server{cfg: cfg, log: cfg.Logger.Named("api"), mux: http.NewServeMux()}
	s.route("GET /v1/episodes", s.listEpisodes)
	s.route("POST /v1/episodes", s.startEpisode)
	s.route("GET /v1/episodes/{id}", s.episode)
	s.route("POST /v1/episodes/{id}/abort", s.abort)
	s.route("POST /v1/episodes/{id}/complete", s.complete)
	s.route("GET /v1/episodes/{id}/effects", s.listEffects)
	s.route("GET /v1/episodes/{id}/events", s.events)
	s.route("GET /v1/episodes/{id}/verify", s.verify)
	s.route("GET /v1/episodes/{id}/egress", s.egress)
	s.route("GET /v1/effects/{id}", s.effect)
	s.route("GET /v1/effects/{id}/patch", s.patch)
	s.route("POST /v1/effects/{id}/approval", s.approve)
	s.route("POST /v1/effects/{id}/settle", s.settle)
	s.route("GET /v1/actions", s.listActions)
	s.route("GET /v1/actions/{id}", s.action)
	s.route("POST /v1/actions/{id}/snooze", s.snoozeAction)
	s.route("POST /v1/actions/{id}/dismiss", s.dismissAction)
	s.route("POST /v1/actions/{id}/resolve", s.resolveAction)
	s.route("POST /v1/tasks", s.submitTask)
	s.route("GET /v1/tasks", s.listTasks)
	s.route("GET /v1/tasks/{id}", s.task)
	s.route("POST /v1/tasks/{id}/cancel", s.cancelTask)
	s.route("GET /v1/tasks/{id}/events", s.taskEvents)
	s.route("GET /v1/budgets", s.budgets)
	s.route("GET /v1/targets", s.listTargets)
	s.route("POST /v1/targets", s.addTarget)
	s.route("GET /v1/policy-keys", s.listKeys)
	s.route("POST /v1/policy-keys", s.addKey)
	s.route("GET /v1/preflight", s.preflight)
	s.route("GET /v1/kernel", s.kernel)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, "unrouted", protocol.E(protocol.CodeUnknownAction))
	})
	return s, nil
}

type handler func(ctx context.Context, r *http.Request) (any, error)

// route wraps every handler in the peer check, the deadline and the
// error mapping, so no handler can forget one.
func (s *Server) route(pattern string, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p := peerOf(r.Context())
		if !s.cfg.Access.allows(p) {
			uid := int64(-1)
			if p != nil {
				uid = int64(p.UID)
			}
			s.log.Warn("api peer refused", "uid", uid, "route", pattern)
			s.fail(w, r, pattern, protocol.E(protocol.CodePeerRefused))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		v, err := h(ctx, r)
		if err != nil {
			s.fail(w, r, pattern, err)
			return
		}
		s.log.Debug("api", "route", pattern, "uid", p.UID)
		writeJSON(w, http.StatusOK, v)
	})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, route string, err error) {
	wire := protocol.AsWire(err)
	// The local cause may name internals; it goes to the log, never to
	// the wire. It never holds a payload: handlers wrap only store and
	// controller errors, which are catalogue errors by contract.
	s.log.Info("api request failed", "route", route, "code", wire.Code, "error", err)
	writeJSON(w, statusOf(wire.Code), ErrorView{Error: *wire})
}

func statusOf(c protocol.Code) int {
	switch c {
	case protocol.CodeNotFound:
		return http.StatusNotFound
	case protocol.CodeMalformedJSON, protocol.CodeDuplicateKey, protocol.CodeTooDeep, protocol.CodeTooManyNodes,
		protocol.CodeTrailingData, protocol.CodeUnknownField, protocol.CodeMissingField, protocol.CodeInvalidField,
		protocol.CodeFrameTooLarge:
		return http.StatusBadRequest
	case protocol.CodePeerRefused, protocol.CodeForbidden, protocol.CodeApprovalInvalid:
		return http.StatusForbidden
	case protocol.CodeIllegalTransition, protocol.CodeStaleAuthority, protocol.CodeStaleRequestEpoch, protocol.CodeApprovalRequired:
		return http.StatusConflict
	case protocol.CodeAuthorityUnavailable:
		return http.StatusServiceUnavailable
	case protocol.CodeEffectBrokerSaturated:
		return http.StatusTooManyRequests
	case protocol.CodeUnknownAction:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func pathID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, protocol.Errorf(protocol.CodeInvalidField, "id is not a UUID")
	}
	return id, nil
}

func queryInt(r *http.Request, name string, def, max int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, protocol.Errorf(protocol.CodeInvalidField, "%s must be 0..%d", name, max)
	}
	return n, nil
}

// readBody reads a capped body and decodes it strictly into v.
func readBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return protocol.Errorf(protocol.CodeMalformedJSON, "reading body: %w", err)
	}
	if len(b) > maxBody {
		return protocol.E(protocol.CodeFrameTooLarge)
	}
	if err := protocol.CheckShape(b, protocol.Limits{MaxDepth: 16, MaxNodes: 1 << 14}); err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	return protocol.DecodeStrict(b, v)
}

func (s *Server) listEpisodes(ctx context.Context, r *http.Request) (any, error) {
	limit, err := queryInt(r, "limit", 100, store.MaxList)
	if err != nil {
		return nil, err
	}
	eps, err := s.cfg.Store.ListEpisodes(ctx, int(limit))
	if err != nil {
		return nil, err
	}
	out := make([]EpisodeView, 0, len(eps))
	for _, e := range eps {
		v := episodeView(e)
		if s.cfg.Controller != nil {
			if l, ok := s.cfg.Controller.Live(e.ID); ok {
				v.Live = &l
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Server) episode(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	e, err := s.cfg.Store.Episode(ctx, id)
	if err != nil {
		return nil, err
	}
	v := episodeView(e)
	if s.cfg.Controller != nil {
		if l, ok := s.cfg.Controller.Live(id); ok {
			v.Live = &l
		}
	}
	if e.State != store.EpisodeActive {
		// How it ended by itself, read back from its ledger (an
		// operator's end or a containment has no outcome).
		es, err := s.cfg.Store.Events(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, ev := range es {
			var b struct {
				Reason string `json:"reason"`
			}
			if ev.Kind == "episode_ended" && json.Unmarshal(ev.Body, &b) == nil {
				if o, ok := episode.ParseOutcome(b.Reason); ok {
					v.Outcome = &o
				}
			}
		}
	}
	return v, nil
}

func (s *Server) startEpisode(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Controller == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "episode start: no episode controller is wired into this kernel")
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(b) > maxBody {
		return nil, protocol.E(protocol.CodeFrameTooLarge)
	}
	id, err := s.cfg.Controller.Start(ctx, b)
	if err != nil {
		return nil, err
	}
	e, err := s.cfg.Store.Episode(ctx, id)
	if err != nil {
		return nil, err
	}
	return episodeView(e), nil
}

// AbortRequest is the abort body.
type AbortRequest struct {
	Reason string `json:"reason"`
}

// endRequest reads an abort or complete request: the episode id and the
// operator's reason, prefixed with who gave it.
func endRequest(ctx context.Context, r *http.Request) (uuid.UUID, string, error) {
	id, err := pathID(r)
	if err != nil {
		return id, "", err
	}
	var req AbortRequest
	if err := readBody(r, &req); err != nil {
		return id, "", err
	}
	if req.Reason == "" || len(req.Reason) > 200 {
		return id, "", protocol.Errorf(protocol.CodeInvalidField, "reason must be 1..200 bytes")
	}
	return id, operatorName(ctx) + ": " + req.Reason, nil
}

// complete ends an episode as completed. Only the kernel driving it may:
// completion vouches for a live episode's work, which a kernel that does
// not drive it cannot see (abort is the way to end an orphan).
func (s *Server) complete(ctx context.Context, r *http.Request) (any, error) {
	id, reason, err := endRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	if s.cfg.Controller == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "this kernel runs no episode controller")
	}
	driven, err := s.cfg.Controller.Complete(ctx, id, reason)
	if err != nil {
		return nil, err
	}
	if !driven {
		if _, err := s.cfg.Store.Episode(ctx, id); err != nil {
			return nil, err
		}
		return nil, protocol.Errorf(protocol.CodeIllegalTransition, "this kernel does not drive the episode; only abort can end it")
	}
	e, err := s.cfg.Store.Episode(ctx, id)
	if err != nil {
		return nil, err
	}
	return episodeView(e), nil
}

func (s *Server) abort(ctx context.Context, r *http.Request) (any, error) {
	id, reason, err := endRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	driven := false
	if s.cfg.Controller != nil {
		if driven, err = s.cfg.Controller.Abort(ctx, id, reason); err != nil {
			return nil, err
		}
	}
	if !driven {
		// Not driven here: take ownership (refused while another kernel
		// holds a live lease on it, so two kernels never both act), then
		// end it in the store under its current epoch.
		if _, err := s.cfg.Store.AcquireOwnership(ctx, id); err != nil {
			return nil, err
		}
		e, err := s.cfg.Store.Episode(ctx, id)
		if err != nil {
			return nil, err
		}
		if _, err := s.cfg.Store.EndEpisode(ctx, store.EndEpisode{EpisodeID: id, Epoch: e.Epoch, State: store.EpisodeAborted, Reason: reason}); err != nil {
			return nil, err
		}
	}
	e, err := s.cfg.Store.Episode(ctx, id)
	if err != nil {
		return nil, err
	}
	return episodeView(e), nil
}

func (s *Server) listEffects(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	limit, err := queryInt(r, "limit", store.MaxList, store.MaxList)
	if err != nil {
		return nil, err
	}
	if _, err := s.cfg.Store.Episode(ctx, id); err != nil {
		return nil, err
	}
	effs, err := s.cfg.Store.ListEffects(ctx, id, int(limit))
	if err != nil {
		return nil, err
	}
	out := make([]EffectView, 0, len(effs))
	for _, e := range effs {
		out = append(out, effectView(e))
	}
	return out, nil
}

func (s *Server) effect(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	e, err := s.cfg.Store.Effect(ctx, id)
	if err != nil {
		return nil, err
	}
	ds, err := s.cfg.Store.Decisions(ctx, id)
	if err != nil {
		return nil, err
	}
	v := effectView(e)
	v.Decisions = []DecisionView{}
	for _, d := range ds {
		v.Decisions = append(v.Decisions, decisionView(d))
	}
	return v, nil
}

// PatchView is a git_commit effect's patch, as the worker or the harvest
// proposed it (the bytes git applies; base64, since a patch may be
// binary).
type PatchView struct {
	EffectID string `json:"effect_id"`
	State    string `json:"state"`
	PatchB64 string `json:"patch_b64"`
}

// maxPatch bounds the patch the API answers with.
const maxPatch = 64 << 20

// patch answers a git_commit effect's stored patch: what a denied or
// ref-moved run proposed stays readable (until the payload retention
// removes it), so the work is not lost with the verdict.
func (s *Server) patch(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Payloads == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "effect patch: no payload store is wired into this kernel")
	}
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	e, err := s.cfg.Store.Effect(ctx, id)
	if err != nil {
		return nil, err
	}
	if e.Kind != "git_commit" {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "effect %s is %s, not git_commit: it has no patch", id, e.Kind)
	}
	b, err := s.cfg.Payloads.Get(e.PayloadDigest, maxPatch)
	if protocol.AsWire(err).Code == protocol.CodeNotFound {
		return nil, protocol.Errorf(protocol.CodeNotFound, "the patch of effect %s is no longer stored (payload retention)", id)
	}
	if err != nil {
		return nil, err // a payload that does not match its digest is not answered
	}
	return PatchView{EffectID: id.String(), State: string(e.State), PatchB64: base64.StdEncoding.EncodeToString(b)}, nil
}

// approve takes a signed protocol.Approval for the effect named in the
// path. The kernel is not trusted to have signed anything: the body is
// verified against decision_keys exactly as a worker-carried approval is at
// evaluate, and recorded the same way (a human decision row holding the
// signed bytes, and its decision_recorded ledger entry). The answer is the
// effect afterwards: ready for allow, still evaluating for deny.
func (s *Server) approve(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Approver == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "effect approval: no broker is wired into this kernel")
	}
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	var a protocol.Approval
	if err := readBody(r, &a); err != nil {
		return nil, err
	}
	e, err := s.cfg.Approver.Approve(ctx, id, &a)
	if err != nil {
		return nil, err
	}
	uid := int64(-1)
	if p := peerOf(ctx); p != nil {
		uid = int64(p.UID)
	}
	// Who submitted it goes to the log (the ledger names the key, which
	// is who signed it); nothing from the body does.
	s.log.Info("effect approval recorded", "effect", id, "uid", uid, "state", e.State)
	return effectView(e), nil
}

// listTargets answers the git_commit targets, configured and added.
func (s *Server) listTargets(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Targets == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "targets: no registry is wired into this kernel")
	}
	return s.cfg.Targets.List(), nil
}

// addTarget registers a repository as a git_commit target while the
// kernel runs (autonomic repo add): no configuration edit, no restart.
func (s *Server) addTarget(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Targets == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "targets: no registry is wired into this kernel")
	}
	var req targets.Request
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	if len(req.Test) > 32 || len(req.Setup) > 32 {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "test, setup: at most 32 arguments")
	}
	added, err := s.cfg.Targets.Add(ctx, req)
	if err != nil {
		return nil, err
	}
	uid := int64(-1)
	if p := peerOf(ctx); p != nil {
		uid = int64(p.UID)
	}
	s.log.Info("git_commit target added", "target", added.ID, "uid", uid)
	return added, nil
}

// KeyRequest registers a policy key: its id and its standard base64
// Ed25519 public key.
type KeyRequest struct {
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
}

// listKeys answers the policy keys a signed policy verifies against now:
// key id → standard base64 public key (public halves only).
func (s *Server) listKeys(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Keys == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "policy keys: not wired into this kernel")
	}
	out := map[string]string{}
	for id, k := range s.cfg.Keys.Keys() {
		out[id] = base64.StdEncoding.EncodeToString(k)
	}
	return out, nil
}

// addKey registers a policy key while the kernel runs. A policy signed by
// it then defines what an episode may do, within the envelope: so only
// the kernel's own account and root may, not every operator — a member of
// the operator group asks them (autonomic run prints the command).
func (s *Server) addKey(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Keys == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "policy keys: not wired into this kernel")
	}
	p := peerOf(ctx)
	if p == nil || (p.UID != 0 && p.UID != s.cfg.Access.KernelUID) {
		return nil, protocol.Errorf(protocol.CodePeerRefused, "registering a policy key takes the kernel's account or root")
	}
	var req KeyRequest
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	if err := s.cfg.Keys.Add(req.KeyID, req.PublicKey); err != nil {
		return nil, err
	}
	s.log.Info("policy key registered", "key_id", req.KeyID, "uid", p.UID)
	return map[string]string{"key_id": req.KeyID}, nil
}

// SettleRequest is an operator's word on a commit_unknown effect.
type SettleRequest struct {
	Outcome string `json:"outcome"` // "committed" or "not_committed"
	Reason  string `json:"reason"`
}

// settle records an operator's word on an effect whose outcome nothing
// here can find (a removed target's, an ambiguous ref): the broker takes
// it only when the target cannot decide, and the receipt keeps who and why.
func (s *Server) settle(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Settler == nil {
		return nil, protocol.Errorf(protocol.CodeUnknownAction, "effect settle: no broker is wired into this kernel")
	}
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	var req SettleRequest
	if err := readBody(r, &req); err != nil {
		return nil, err
	}
	if req.Outcome != "committed" && req.Outcome != "not_committed" {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "outcome must be committed or not_committed")
	}
	if req.Reason == "" || len(req.Reason) > 200 || !utf8.ValidString(req.Reason) || strings.ContainsFunc(req.Reason, unicode.IsControl) {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "reason must be 1..200 bytes of text")
	}
	uid := int64(-1)
	if p := peerOf(ctx); p != nil {
		uid = int64(p.UID)
	}
	e, err := s.cfg.Settler.Settle(ctx, id, req.Outcome == "committed", uid, req.Reason)
	if err != nil {
		return nil, err
	}
	s.log.Info("effect settled by an operator", "effect", id, "uid", uid, "state", e.State)
	return effectView(e), nil
}

// events answers the ledger entries after ?after=SEQ, at most ?limit=N.
func (s *Server) events(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	after, err := queryInt(r, "after", 0, 1<<62)
	if err != nil {
		return nil, err
	}
	limit, err := queryInt(r, "limit", defaultTailLimit, store.MaxList)
	if err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = defaultTailLimit
	}
	if _, err := s.cfg.Store.Episode(ctx, id); err != nil {
		return nil, err
	}
	es, err := s.cfg.Store.Events(ctx, id)
	if err != nil {
		return nil, err
	}
	out := []EventView{}
	for _, e := range es {
		if e.Seq > after {
			out = append(out, eventView(e))
		}
	}
	// Without ?after the tail is the last limit entries; with it, the
	// first limit entries after that point (so a follower never skips).
	if r.URL.Query().Get("after") == "" && int64(len(out)) > limit {
		out = out[int64(len(out))-limit:]
	} else if int64(len(out)) > limit {
		out = out[:limit]
	}
	return out, nil
}

// egressLedger is the fetch ledger, when the store keeps one
// (*store.Postgres does).
type egressLedger interface {
	EgressFetches(ctx context.Context, episodeID uuid.UUID) ([]store.EgressFetch, error)
}

// egress is the episode's egress fetch ledger: every fetch its proxies
// admitted or refused (the worker's and its verifications'), without
// content.
func (s *Server) egress(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	if _, err := s.cfg.Store.Episode(ctx, id); err != nil {
		return nil, err
	}
	out := []EgressView{}
	l, ok := s.cfg.Store.(egressLedger)
	if !ok {
		return out, nil
	}
	fs, err := l.EgressFetches(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		out = append(out, EgressView{Kind: f.Kind, Method: f.Method, Host: f.Host, Path: f.Path, Outcome: f.Outcome, Code: f.Code,
			Reason: f.Reason, Status: f.Status, Bytes: f.Bytes, BytesUp: f.BytesUp, SHA256: f.SHA256,
			DurationMS: f.Duration.Milliseconds(), At: f.At})
	}
	return out, nil
}

func (s *Server) verify(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	rep, err := s.cfg.Store.VerifyLedger(ctx, id)
	if err != nil {
		return nil, err
	}
	v := VerifyView{EpisodeID: id.String(), OK: rep.OK(), Entries: rep.Entries, HeadSeq: rep.Head.Seq, HeadHash: hexHash(rep.Head.Hash)}
	if rep.Broken != nil {
		seq := rep.Broken.Seq
		v.BrokenAt, v.Reason = &seq, rep.Broken.Reason
	}
	return v, nil
}

func (s *Server) preflight(ctx context.Context, _ *http.Request) (any, error) {
	return Preflight(ctx, s.cfg.Store, s.cfg.Preflight), nil
}

// Preflight combines the host's report with the database's reachability
// into one verdict: refused if either refuses or the database is
// unreachable.
func Preflight(ctx context.Context, st Store, host func(context.Context) (*protocol.PreflightReport, error)) PreflightView {
	v := PreflightView{Verdict: "ok"}
	worst := func(verdict string) {
		rank := map[string]int{"ok": 0, "degraded": 1, "refused": 2}
		if rank[verdict] > rank[v.Verdict] {
			v.Verdict = verdict
		}
	}
	if host != nil {
		rep, err := host(ctx)
		if err != nil {
			w := protocol.AsWire(err)
			v.Checks = append(v.Checks, Check{Name: "host", OK: false, Detail: string(w.Code) + ": " + w.Message})
			worst("refused")
		} else {
			v.Host = rep
			v.Checks = append(v.Checks, Check{Name: "host", OK: rep.Verdict != "refused", Detail: "launcher verdict " + rep.Verdict})
			worst(rep.Verdict)
		}
	}
	if st != nil {
		if _, err := st.ListEpisodes(ctx, 1); err != nil {
			w := protocol.AsWire(err)
			v.Checks = append(v.Checks, Check{Name: "database", OK: false, Detail: string(w.Code) + ": " + w.Message})
			worst("refused")
		} else {
			v.Checks = append(v.Checks, Check{Name: "database", OK: true, Detail: "reachable; schema matches this binary"})
		}
	}
	return v
}

// Listen binds the API socket at path, mode 0660, owned by uid and gid
// (gid < 0: the caller's group). A stale socket left by a dead kernel is
// replaced; a live one, or anything that is not a socket, is refused.
func Listen(path string, uid, gid int) (net.Listener, error) {
	// The socket's directory (/run/autonomic) is made when missing, as
	// systemd's RuntimeDirectory would: 0750, the kernel's account and the
	// operator group, so the shipped configuration starts without it.
	// Only that one directory: nothing above it is created.
	if dir := filepath.Dir(path); dir != "/" {
		if err := os.Mkdir(dir, 0o750); err == nil {
			if err := os.Chown(dir, uid, gid); err != nil {
				return nil, fmt.Errorf("api: chown %s: %w", dir, err)
			}
		} else if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("api: making the socket's directory: %w", err)
		}
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("api: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("api: another kernel already serves %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api: removing stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	// Between bind and chmod the socket has the umask's mode; the peer
	// check in every handler covers that window.
	if err := os.Chown(path, uid, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api: chown socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api: chmod socket: %w", err)
	}
	return ln, nil
}

// Serve answers on ln until ctx ends, then shuts down gracefully (bounded
// by 5 s) and closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.mux,
		ConnContext:       connContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       s.cfg.RequestTimeout,
		WriteTimeout:      s.cfg.RequestTimeout + 5*time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-done
	return err
}
