// Package metrics is the kernel's Prometheus endpoint: what its parts do,
// for the monitoring an operator already runs.
//
// Invariant: no label carries an id or worker-chosen text. Labels are
// drawn from closed sets — episode and effect states, effect kinds and
// launcher actions of this kernel, providers and models of its trusted
// configuration — so the series an endpoint exposes are bounded by the
// configuration, not by what workers do. The store's aggregates are read
// at scrape time, in one bounded query set; latencies are observed on the
// production paths themselves (the broker's adapters, the launcher
// client, the store round trip). The endpoint serves only GET /metrics on
// a listener the configuration names (loopback TCP or a Unix socket).
package metrics
