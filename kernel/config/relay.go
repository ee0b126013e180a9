package config

import (
	"net"
	"net/url"
	"sort"
	"strings"

	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

// The inference relay's providers (issue 13, kernel/relay). Kept in this
// file, apart from the rest, so it can change without touching them.
//
// A provider names no secret: its credential is an environment variable of
// the kernel or a file only the service account can read, resolved by the
// relay when an episode's relay starts, never written here.

// Inference is the inference section.
type Inference struct {
	// Providers by name ([a-z0-9][a-z0-9_.-]*).
	Providers map[string]Provider `json:"providers"`
}

// Provider is one upstream model API.
type Provider struct {
	// WireAPI is "responses", "chat" or "messages".
	WireAPI string `json:"wire_api"`
	// Upstream is the base URL the route is appended to, e.g.
	// "https://api.openai.com". https, or http to a loopback host only:
	// the credential never crosses a network in clear.
	Upstream string `json:"upstream"`
	// CredentialEnv or CredentialFile (at most one) names the key the
	// relay injects; neither: a keyless upstream (a local model server).
	CredentialEnv  string `json:"credential_env"`
	CredentialFile string `json:"credential_file"`
	// Routes the relay forwards, each an inference route of WireAPI
	// (InferenceRoutes). Default: the wire API's route.
	Routes []string `json:"routes"`
	// Models the provider may be asked for; the policy narrows further.
	Models []string `json:"models"`
	// Prices per model (every model in Models must have one).
	Prices map[string]Price `json:"prices"`
	// MaxRequestBytes caps one request body.
	MaxRequestBytes int `json:"max_request_bytes"`
	// MaxOutputTokens is what a call is assumed to produce when its
	// request names no output cap (the reservation's ceiling).
	MaxOutputTokens int `json:"max_output_tokens"`
	// HeaderTimeoutMS bounds the wait for the upstream's response headers.
	HeaderTimeoutMS int `json:"header_timeout_ms"`
}

// Price is a model's price in millionths of a US dollar per million tokens
// (so 1.25 USD per million is 1250000).
type Price struct {
	InputMicroUSDPerMTok  int64 `json:"input_micro_usd_per_mtok"`
	OutputMicroUSDPerMTok int64 `json:"output_micro_usd_per_mtok"`
}

// Wire APIs.
const (
	WireResponses = "responses"
	WireChat      = "chat"
	WireMessages  = "messages"
)

// InferenceRoutes is each wire API's route: the only paths a relay can ever
// forward (always POST; the query string is kept).
var InferenceRoutes = map[string]string{
	WireResponses: "/v1/responses",
	WireChat:      "/v1/chat/completions",
	WireMessages:  "/v1/messages",
}

// Provider defaults.
const (
	DefaultRelayMaxRequestBytes = 16 << 20
	DefaultRelayMaxOutputTokens = 32768
	DefaultRelayHeaderTimeoutMS = 300000
)

func checkInference(c *checker, inf *Inference) {
	names := make([]string, 0, len(inf.Providers))
	for n := range inf.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := inf.Providers[name]
		k := "inference.providers." + name
		if !targetIDPattern.MatchString(name) {
			c.add(k, "provider name must match %s", targetIDPattern)
		}
		route, known := InferenceRoutes[p.WireAPI]
		if !known {
			c.add(k+".wire_api", "must be %q, %q or %q", WireResponses, WireChat, WireMessages)
		}
		checkUpstream(c, k+".upstream", p.Upstream)
		if p.CredentialEnv != "" && p.CredentialFile != "" {
			c.add(k+".credential_env", "give credential_env or credential_file, not both")
		}
		if p.CredentialEnv != "" && !envPattern.MatchString(p.CredentialEnv) {
			c.add(k+".credential_env", "must be an environment variable name")
		}
		c.absPath(k+".credential_file", p.CredentialFile, false)
		if p.Routes == nil && known {
			p.Routes = []string{route}
		}
		for _, r := range p.Routes {
			if r != route {
				c.add(k+".routes", "%q is not the %s route (%s)", r, p.WireAPI, route)
			}
		}
		if len(p.Models) == 0 {
			c.add(k+".models", "must name at least one model")
		}
		for _, m := range p.Models {
			if !policy.ValidModel(m) {
				c.add(k+".models", "%q is not a model id", m)
			} else if _, ok := p.Prices[m]; !ok {
				c.add(k+".prices", "has no price for %q", m)
			}
		}
		for m, pr := range p.Prices {
			if pr.InputMicroUSDPerMTok < 0 || pr.OutputMicroUSDPerMTok < 0 ||
				pr.InputMicroUSDPerMTok > 1<<40 || pr.OutputMicroUSDPerMTok > 1<<40 {
				c.add(k+".prices."+m, "prices must be 0..2^40")
			}
		}
		c.defaulted(k+".max_request_bytes", &p.MaxRequestBytes, DefaultRelayMaxRequestBytes, 1024, 256<<20)
		c.defaulted(k+".max_output_tokens", &p.MaxOutputTokens, DefaultRelayMaxOutputTokens, 1, 1<<24)
		c.defaulted(k+".header_timeout_ms", &p.HeaderTimeoutMS, DefaultRelayHeaderTimeoutMS, 100, 3600000)
		inf.Providers[name] = p
	}
}

// checkUpstream: an absolute http(s) URL with no user info, query or
// fragment; plain http only to a loopback host.
func checkUpstream(c *checker, key, raw string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		c.add(key, "is required")
		return
	case err != nil || u.Host == "" || u.Opaque != "":
		c.add(key, "must be an absolute http(s) URL")
		return
	case u.User != nil:
		c.add(key, "must not carry user info; name the key with credential_env or credential_file")
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(u.Path, "/"):
		c.add(key, "must have no query, fragment or trailing /")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			c.add(key, "plain http is allowed only to a loopback host")
		}
	default:
		c.add(key, "must be an http(s) URL")
	}
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
