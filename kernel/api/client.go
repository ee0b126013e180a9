package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/autonomic-kernel/autonomic/kernel/targets"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// Client talks to a kernel's API socket.
type Client struct {
	hc *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	return &Client{hc: &http.Client{Transport: tr}}
}

// ErrUnreachable wraps a failure to reach the kernel at all.
var errUnreachable = errors.New("api: the kernel is not reachable on its socket")

// IsUnreachable reports whether err means no kernel answered.
func IsUnreachable(err error) bool { return errors.Is(err, errUnreachable) }

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://autonomic" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errUnreachable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w: %v", errUnreachable, err)
	}
	if resp.StatusCode != http.StatusOK {
		var ev ErrorView
		if json.Unmarshal(b, &ev) == nil && protocol.Known(ev.Error.Code) {
			return protocol.E(ev.Error.Code)
		}
		return protocol.Errorf(protocol.CodeInternal, "api: status %d", resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

// Episodes lists episodes, newest first.
func (c *Client) Episodes(ctx context.Context, limit int) ([]EpisodeView, error) {
	var out []EpisodeView
	return out, c.do(ctx, http.MethodGet, "/v1/episodes", url.Values{"limit": {strconv.Itoa(limit)}}, nil, &out)
}

// Episode reads one episode.
func (c *Client) Episode(ctx context.Context, id string) (EpisodeView, error) {
	var out EpisodeView
	return out, c.do(ctx, http.MethodGet, "/v1/episodes/"+url.PathEscape(id), nil, nil, &out)
}

// Start starts an episode from a spec document.
func (c *Client) Start(ctx context.Context, spec json.RawMessage) (EpisodeView, error) {
	var out EpisodeView
	return out, c.do(ctx, http.MethodPost, "/v1/episodes", nil, spec, &out)
}

// Abort ends an episode as aborted.
func (c *Client) Abort(ctx context.Context, id, reason string) (EpisodeView, error) {
	var out EpisodeView
	return out, c.do(ctx, http.MethodPost, "/v1/episodes/"+url.PathEscape(id)+"/abort", nil, AbortRequest{Reason: reason}, &out)
}

// Complete ends an episode the kernel drives as completed.
func (c *Client) Complete(ctx context.Context, id, reason string) (EpisodeView, error) {
	var out EpisodeView
	return out, c.do(ctx, http.MethodPost, "/v1/episodes/"+url.PathEscape(id)+"/complete", nil, AbortRequest{Reason: reason}, &out)
}

// Targets lists the kernel's git_commit targets.
func (c *Client) Targets(ctx context.Context) ([]targets.Entry, error) {
	var out []targets.Entry
	return out, c.do(ctx, http.MethodGet, "/v1/targets", nil, nil, &out)
}

// AddTarget registers a repository as a git_commit target.
func (c *Client) AddTarget(ctx context.Context, req targets.Request) (targets.Added, error) {
	var out targets.Added
	return out, c.do(ctx, http.MethodPost, "/v1/targets", nil, req, &out)
}

// PolicyKeys lists the policy keys the kernel verifies against now.
func (c *Client) PolicyKeys(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	return out, c.do(ctx, http.MethodGet, "/v1/policy-keys", nil, nil, &out)
}

// AddKey registers a policy key with the running kernel.
func (c *Client) AddKey(ctx context.Context, id, pub string) error {
	var out map[string]string
	return c.do(ctx, http.MethodPost, "/v1/policy-keys", nil, KeyRequest{KeyID: id, PublicKey: pub}, &out)
}

// Settle records an operator's word on a commit_unknown effect.
func (c *Client) Settle(ctx context.Context, effectID string, committed bool, reason string) (EffectView, error) {
	req := SettleRequest{Outcome: "not_committed", Reason: reason}
	if committed {
		req.Outcome = "committed"
	}
	var out EffectView
	return out, c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(effectID)+"/settle", nil, req, &out)
}

// Effects lists an episode's effects.
func (c *Client) Effects(ctx context.Context, episodeID string) ([]EffectView, error) {
	var out []EffectView
	return out, c.do(ctx, http.MethodGet, "/v1/episodes/"+url.PathEscape(episodeID)+"/effects", nil, nil, &out)
}

// Effect reads one effect.
func (c *Client) Effect(ctx context.Context, id string) (EffectView, error) {
	var out EffectView
	return out, c.do(ctx, http.MethodGet, "/v1/effects/"+url.PathEscape(id), nil, nil, &out)
}

// Patch reads a git_commit effect's stored patch.
func (c *Client) Patch(ctx context.Context, effectID string) (PatchView, error) {
	var out PatchView
	return out, c.do(ctx, http.MethodGet, "/v1/effects/"+url.PathEscape(effectID)+"/patch", nil, nil, &out)
}

// Approve submits a signed decision on a class 4 effect; the answer is the
// effect afterwards.
func (c *Client) Approve(ctx context.Context, effectID string, a *protocol.Approval) (EffectView, error) {
	var out EffectView
	return out, c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(effectID)+"/approval", nil, a, &out)
}

// Events reads ledger entries: the last limit ones (after < 0) or the
// first limit ones after seq after.
func (c *Client) Events(ctx context.Context, episodeID string, after int64, limit int) ([]EventView, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	var out []EventView
	return out, c.do(ctx, http.MethodGet, "/v1/episodes/"+url.PathEscape(episodeID)+"/events", q, nil, &out)
}

// Egress is the episode's egress fetch ledger.
func (c *Client) Egress(ctx context.Context, episodeID string) ([]EgressView, error) {
	var out []EgressView
	return out, c.do(ctx, http.MethodGet, "/v1/episodes/"+url.PathEscape(episodeID)+"/egress", nil, nil, &out)
}

// Verify verifies an episode's ledger.
func (c *Client) Verify(ctx context.Context, episodeID string) (VerifyView, error) {
	var out VerifyView
	return out, c.do(ctx, http.MethodGet, "/v1/episodes/"+url.PathEscape(episodeID)+"/verify", nil, nil, &out)
}

// Preflight asks the kernel for its preflight.
func (c *Client) Preflight(ctx context.Context) (PreflightView, error) {
	var out PreflightView
	return out, c.do(ctx, http.MethodGet, "/v1/preflight", nil, nil, &out)
}
