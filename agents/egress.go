package agent

import (
	"encoding/base64"
	"strings"
)

// The egress bridge (issue 14): autonomic-entry forwards EgressBridgeAddr
// to the episode's egress proxy socket, and the tools inside find the
// proxy through EgressEnv.
const (
	EgressBridgeAddr = "127.0.0.1:8788"
	EgressSocket     = "/run/autonomic/egress.sock"
	// EgressProxyURL is HTTP_PROXY/HTTPS_PROXY inside the domain.
	EgressProxyURL = "http://" + EgressBridgeAddr
)

// EgressEnv is the environment that sends the package tools of the agents
// rootfs through the egress proxy:
//
//   - HTTP_PROXY/HTTPS_PROXY (and the lower-case forms curl and pip read)
//     name the bridge; NO_PROXY keeps loopback direct, so the agent's own
//     model calls still go to the inference bridge and never to the proxy.
//   - The registries are named as the tools name them by default, over
//     HTTPS (GOPROXY, npm_config_registry, PIP_INDEX_URL): the proxy
//     terminates each CONNECT with the episode's CA (EgressCAArgs, added
//     by the kernel), so every request inside is read, recorded path by
//     path, held to the registry's rules and served from the host's
//     cache like a plain-HTTP one; upstream it fetches over verified
//     HTTPS. go's checksum database is reached through the module proxy
//     (GOSUMDB stays the default, verified by its signed tree).
//   - GOTOOLCHAIN=local: the toolchain is the rootfs's, the one its
//     manifest records; a go.mod asking for a newer one fails rather than
//     downloading and running an unrecorded toolchain.
//
// GOFLAGS is left alone: -mod=mod would let every go command rewrite
// go.mod and go.sum behind the agent's back, changes the harvest would
// then propose; "go mod download" / "go get" remain explicit.
func EgressEnv() []string {
	return []string{
		"HTTP_PROXY=" + EgressProxyURL, "HTTPS_PROXY=" + EgressProxyURL,
		"http_proxy=" + EgressProxyURL, "https_proxy=" + EgressProxyURL,
		"NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1",
		"GOPROXY=https://proxy.golang.org", "GOTOOLCHAIN=local",
		"npm_config_registry=https://registry.npmjs.org/",
		"PIP_INDEX_URL=https://pypi.org/simple/",
	}
}

// reservedEnv are the variables EgressEnv owns: a profile may not set them
// (with egress or without: a profile naming its own proxy would route
// around the bridge).
func reservedEnv(name string) bool {
	for _, kv := range EgressEnv() {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	for _, k := range egressCAEnv {
		if k == name {
			return true
		}
	}
	switch name {
	case "ALL_PROXY", "all_proxy", "GONOPROXY", "GOPRIVATE", "GONOSUMDB", "GOSUMDB", "GOINSECURE",
		"npm_config_proxy", "npm_config_https_proxy", "npm_config_noproxy", "PIP_PROXY", "PIP_TRUSTED_HOST":
		return true
	}
	return false
}

// RenderOption adjusts what Render produces.
type RenderOption func(*renderOptions)

type renderOptions struct{ egress bool }

// WithEgress renders the worker for an episode that has an egress proxy:
// autonomic-entry also bridges EgressBridgeAddr to EgressSocket, and the
// agent's environment gains EgressEnv. Without it the rendered argv has
// neither (an episode without egress has no socket to bridge to).
func WithEgress() RenderOption { return func(o *renderOptions) { o.egress = true } }

// WrapEgress runs argv (a trusted command such as a target's verify_argv)
// behind the egress bridge: autonomic-entry bridges EgressBridgeAddr to
// EgressSocket and sets EgressEnv, then runs argv. It adds nothing else
// (no inference bridge, no home files).
func WrapEgress(argv []string) []string {
	out := []string{EntryPath}
	for _, kv := range EgressEnv() {
		out = append(out, "--env", kv)
	}
	out = append(out, "--bridge", EgressBridgeAddr+"="+EgressSocket, "--")
	return append(out, argv...)
}

// EgressCAFile is where autonomic-entry writes the episode's egress CA
// certificate (a home file beneath the launcher's HOME, /tmp/home).
const (
	egressCARel  = ".autonomic/egress-ca.pem"
	EgressCAFile = "/tmp/home/" + egressCARel
)

// EgressCAArgs are the autonomic-entry flags that make the tools trust the
// egress proxy's per-episode CA, which terminates every CONNECT tunnel:
// the certificate (never its key) as a home file, and each toolchain's
// variable naming it. The file holds only that CA: every TLS connection
// from the domain ends at the proxy, so no other root is needed.
func EgressCAArgs(caPEM []byte) []string {
	out := []string{"--home-file", egressCARel + "=" + base64.StdEncoding.EncodeToString(caPEM)}
	for _, k := range egressCAEnv {
		out = append(out, "--env", k+"="+EgressCAFile)
	}
	return out
}

// egressCAEnv are the toolchains' variables naming a CA bundle.
var egressCAEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "NPM_CONFIG_CAFILE", "npm_config_cafile",
	"PIP_CERT", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}

// WithEgressCA is argv with EgressCAArgs added right after autonomic-entry,
// which the kernel does when it starts a domain for an episode with
// egress (the argv was rendered before the episode's CA existed). An argv
// that does not start with autonomic-entry is returned as it is: nothing
// in it reads the flags, and its tools are not pointed at the proxy.
func WithEgressCA(argv []string, caPEM []byte) []string {
	if len(argv) == 0 || argv[0] != EntryPath || len(caPEM) == 0 {
		return argv
	}
	out := append([]string{argv[0]}, EgressCAArgs(caPEM)...)
	return append(out, argv[1:]...)
}
