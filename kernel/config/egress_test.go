package config

import (
	"errors"
	"slices"
	"testing"
)

// TestEgressSection: defaults when absent; a bad host, a relative cache
// dir and an out-of-range cap are each one problem under their key.
func TestEgressSection(t *testing.T) {
	const base = `"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}`
	c, err := Parse([]byte(`{` + base + `}`))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Egress
	if e.MaxBytesPerEpisode != DefaultEgressMaxBytesPerEpisode || e.MaxResponseBytes != DefaultEgressMaxResponseBytes ||
		e.TimeoutMS != DefaultEgressTimeoutMS || e.CacheDirValue("/s") != "/s/egress-cache" ||
		!slices.Contains(e.AllowValue(), "proxy.golang.org") || !slices.Contains(e.AllowValue(), "registry.npmjs.org") {
		t.Fatalf("defaults: %+v", e)
	}
	c, err = Parse([]byte(`{` + base + `,"egress":{"allow":[],"cache_dir":"/c"}}`))
	if err != nil || len(c.Egress.AllowValue()) != 0 || c.Egress.CacheDirValue("/s") != "/c" {
		t.Fatalf("explicit: %v %+v", err, c)
	}
	for key, doc := range map[string]string{
		"egress.allow":                    `{"allow":["Proxy.golang.org"]}`,
		"egress.cache_dir":                `{"cache_dir":"cache"}`,
		"egress.max_bytes_per_episode":    `{"max_bytes_per_episode":5}`,
		"egress.max_response_bytes":       `{"max_response_bytes":-1}`,
		"egress.timeout_ms":               `{"timeout_ms":10}`,
		"egress.allowed_nets":             `{"allowed_nets":["10.0.0.0/33"]}`,
		"egress.max_up_bytes_per_episode": `{"max_up_bytes_per_episode":10}`,
		"egress.max_requests_per_episode": `{"max_requests_per_episode":-1}`,
		"egress.request_floor_bytes":      `{"request_floor_bytes":-5}`,
		"egress.max_concurrent":           `{"max_concurrent":100000}`,
	} {
		_, err := Parse([]byte(`{` + base + `,"egress":` + doc + `}`))
		var ce *Error
		if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Key != key {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// TestMetricsListen: the metrics endpoint (no authentication) binds only
// a Unix socket at an absolute path or a loopback address; anything that
// would expose it beyond the host is one problem under its key.
func TestMetricsListen(t *testing.T) {
	for _, key := range []string{"metrics_listen", "console_listen"} {
		t.Run(key, func(t *testing.T) { localListen(t, key) })
	}
	const base = `"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}`
	if _, err := Parse([]byte(`{` + base + `,"api":{"metrics_listen":"127.0.0.1:9","console_listen":"127.0.0.1:9"}}`)); err == nil {
		t.Error("the console and the metrics on one address")
	}
}

// localListen: the key binds only a Unix socket at an absolute path or a
// loopback address.
func localListen(t *testing.T, key string) {
	const base = `"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}`
	for _, ok := range []string{"unix:/run/autonomic/metrics.sock", "127.0.0.1:9464", "[::1]:9464", "localhost:9464"} {
		if _, err := Parse([]byte(`{` + base + `,"api":{"` + key + `":"` + ok + `"}}`)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:9464", ":9464", "10.0.0.1:9464", "[::]:9464", "example.com:9464", "unix:metrics.sock",
		"unix:", "unix:/run/../etc/x", "127.0.0.1", "9464"} {
		_, err := Parse([]byte(`{` + base + `,"api":{"` + key + `":"` + bad + `"}}`))
		var ce *Error
		if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Key != "api."+key {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
