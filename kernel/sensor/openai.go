package sensor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/tidwall/gjson"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Secret is a credential held in configuration. It never prints.
type Secret string

func (Secret) String() string               { return Redacted }
func (Secret) GoString() string             { return Redacted }
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, Redacted) }
func (s Secret) reveal() string             { return string(s) }

// ClientConfig configures the chat-completions sensor.
type ClientConfig struct {
	// Endpoint is the full chat-completions URL
	// (http://127.0.0.1:8080/v1/chat/completions).
	Endpoint string
	// Model is the model requested; it must itself be in AllowedModels.
	Model string
	// AllowedModels is the pinned set: an answer whose "model" is not
	// exactly one of these is degradation, whatever it says.
	AllowedModels []string
	APIKey        Secret // optional; sent as a bearer token, never printed
	Timeout       time.Duration
	RequestLimit  int // bytes of the exact serialised request body
	EvidenceLimit int // bytes of the redacted evidence inside it
	ResponseLimit int // bytes of response body read before giving up
	// HTTPClient overrides the default client (no proxy from the
	// environment, no redirects). Tests and special transports only.
	HTTPClient *http.Client
}

// Bounds on configuration.
const (
	minEvidenceLimit = 1 << 10
	maxLimit         = 16 << 20
	answerLimit      = 4 << 10 // bytes of the model's JSON answer
)

// Client is the model-backed bank: it asks one OpenAI-compatible
// chat-completions endpoint for all five sensors in one strict-schema
// request.
type Client struct {
	cfg      ClientConfig
	http     *http.Client
	redactor *Redactor
}

// NewClient checks the configuration and builds the client.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.Endpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil:
		return nil, errors.New("sensor: endpoint must be an http(s) URL without credentials")
	case len(cfg.AllowedModels) == 0:
		return nil, errors.New("sensor: allowed_models is empty")
	case !slices.Contains(cfg.AllowedModels, cfg.Model):
		return nil, errors.New("sensor: the requested model is not in allowed_models")
	case cfg.Timeout <= 0:
		return nil, errors.New("sensor: timeout must be positive")
	case cfg.EvidenceLimit < minEvidenceLimit || cfg.EvidenceLimit > maxLimit:
		return nil, fmt.Errorf("sensor: evidence_limit outside %d..%d", minEvidenceLimit, maxLimit)
	case cfg.RequestLimit < cfg.EvidenceLimit || cfg.RequestLimit > maxLimit:
		return nil, errors.New("sensor: request_limit must be at least evidence_limit and at most 16 MiB")
	case cfg.ResponseLimit < answerLimit || cfg.ResponseLimit > maxLimit:
		return nil, fmt.Errorf("sensor: response_limit outside %d..%d", answerLimit, maxLimit)
	}
	for _, m := range cfg.AllowedModels {
		if m == "" || len(m) > 128 {
			return nil, errors.New("sensor: an allowed model name is empty or too long")
		}
	}
	cfg.AllowedModels = slices.Clone(cfg.AllowedModels)
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{
			// Evidence goes to the configured endpoint and nowhere else:
			// no proxy from the environment, no redirects.
			Transport: &http.Transport{
				Proxy:                  nil,
				DialContext:            (&net.Dialer{Timeout: cfg.Timeout}).DialContext,
				TLSHandshakeTimeout:    cfg.Timeout,
				MaxResponseHeaderBytes: 64 << 10,
				MaxIdleConnsPerHost:    2,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{cfg: cfg, http: hc, redactor: NewRedactor()}, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

func (c *Client) identity(model string) Identity {
	return Identity{Implementation: "openai-chat", Model: model, Schema: SchemaVersion}
}

// Observe asks the endpoint. Whatever goes wrong, the answer is a degraded
// Reading; only a pinned model answering the strict schema in full yields
// observations.
func (c *Client) Observe(ctx context.Context, f *Frame) Reading {
	body, cause := c.request(f)
	if cause != NotDegraded {
		return degraded(c.identity(c.cfg.Model), cause)
	}
	// One deadline for the whole exchange, never longer than the caller's.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return degraded(c.identity(c.cfg.Model), Outage)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey.reveal())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return degraded(c.identity(c.cfg.Model), failure(ctx, err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.cfg.ResponseLimit)+1))
	switch {
	case err != nil:
		return degraded(c.identity(c.cfg.Model), failure(ctx, err))
	case resp.StatusCode != http.StatusOK:
		return degraded(c.identity(c.cfg.Model), Outage)
	case len(raw) > c.cfg.ResponseLimit:
		return degraded(c.identity(c.cfg.Model), OverBudget)
	}
	return c.parse(raw)
}

func failure(ctx context.Context, err error) Cause {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case errors.Is(ctx.Err(), context.Canceled):
		return Canceled
	}
	return Outage
}

// parse reads a chat-completions response. The envelope is not ours (real
// endpoints add fields), so it is read by exact key after a shape check
// that refuses duplicate keys; the answer inside is ours and is decoded
// strictly.
func (c *Client) parse(raw []byte) Reading {
	bad := func(cause Cause) Reading { return degraded(c.identity(c.cfg.Model), cause) }
	if err := protocol.CheckShape(raw, protocol.Limits{MaxDepth: 16, MaxNodes: 4096}); err != nil {
		return bad(Malformed)
	}
	model := gjson.GetBytes(raw, "model")
	if model.Type != gjson.String {
		return bad(Malformed)
	}
	if !slices.Contains(c.cfg.AllowedModels, model.Str) {
		return degraded(c.identity(printable(model.Str)), UnpinnedModel)
	}
	id := c.identity(model.Str)
	fail := func(cause Cause) Reading { return degraded(id, cause) }
	choices := gjson.GetBytes(raw, "choices")
	if !choices.IsArray() || len(choices.Array()) != 1 {
		return fail(Malformed)
	}
	choice := choices.Array()[0]
	content := choice.Get("message.content")
	refusal := choice.Get("message.refusal")
	switch {
	case choice.Get("finish_reason").Str != "stop":
		return fail(Malformed) // cut off ("length"), filtered, or a tool call
	case refusal.Exists() && refusal.Type != gjson.Null:
		return fail(Malformed)
	case content.Type != gjson.String || len(content.Str) > answerLimit:
		return fail(Malformed)
	}
	levels, ok := decodeAnswer([]byte(content.Str))
	if !ok {
		return fail(Malformed)
	}
	var rd Reading
	for i, n := range Bank() {
		rd.Observations[i] = Observation{Sensor: n, Level: levels[i], Identity: id, Reason: "model:" + levels[i].String()}
	}
	return rd
}

// decodeAnswer decodes the model's answer strictly: exactly the schema's
// fields, every sensor present, every value one of low, medium, high.
// "safe", "none", a number, an extra field — all refused.
func decodeAnswer(b []byte) ([BankSize]Level, bool) {
	var out [BankSize]Level
	if err := protocol.CheckShape(b, protocol.Limits{MaxDepth: 2, MaxNodes: 16}); err != nil {
		return out, false
	}
	var a struct {
		Schema       *string `json:"schema"`
		Observations *struct {
			ScopeDrift          *string `json:"scope_drift"`
			AuthorityEscalation *string `json:"authority_escalation"`
			EvidenceSufficiency *string `json:"evidence_sufficiency"`
			Irreversibility     *string `json:"irreversibility"`
			TrajectoryRegime    *string `json:"trajectory_regime"`
		} `json:"observations"`
	}
	if err := protocol.DecodeStrict(b, &a); err != nil || a.Schema == nil || *a.Schema != SchemaVersion || a.Observations == nil {
		return out, false
	}
	o := a.Observations
	for i, v := range []*string{o.ScopeDrift, o.AuthorityEscalation, o.EvidenceSufficiency, o.Irreversibility, o.TrajectoryRegime} {
		if v == nil {
			return out, false
		}
		switch *v {
		case "low":
			out[i] = Low
		case "medium":
			out[i] = Medium
		case "high":
			out[i] = High
		default:
			return out, false
		}
	}
	return out, true
}

// printable keeps a hostile model name recordable: printable ASCII only,
// bounded.
func printable(s string) string {
	b := make([]byte, 0, min(len(s), 64))
	for i := 0; i < len(s) && len(b) < 64; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		} else {
			b = append(b, '?')
		}
	}
	return string(b)
}
