package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Egress is the policy's grant of dependency fetches (issue 14): the hosts
// an episode's egress proxy (kernel/egress) may reach with GET, HEAD and
// CONNECT to port 443. A policy without it grants no egress at all.
type Egress struct {
	// Allow lists host names, exactly (no wildcards, no IP literals, no
	// ports): lower case, dot-separated DNS labels.
	Allow []string `json:"allow"`
	// MaxBytes caps the bytes all of an episode's fetches may deliver
	// into its domain; 0 (absent): the operator's configured cap. The
	// smaller of the two applies.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Lockfile, when LockfileBound, binds fetches from the package
	// registries to what the base commit's lockfiles name (go.sum,
	// package-lock.json): any other package or version is refused with
	// its name, and every fill is checked against the lock's digest.
	// Absent: any version of a listed registry, reads only.
	Lockfile string `json:"lockfile,omitempty"`
}

// LockfileBound is the egress.lockfile mode that admits only what the
// base commit's lockfiles name.
const LockfileBound = "bound"

// Bounds of an egress grant.
const (
	MaxEgressHosts = 64
	maxHostLen     = 253
)

// egressWire is how the document decoder reads the egress block: every
// field a pointer, so a missing allow list is told from an empty one.
type egressWire struct {
	Allow    []string `json:"allow"`
	MaxBytes *int64   `json:"max_bytes"`
	Lockfile *string  `json:"lockfile"`
}

// decodeEgress checks a decoded egress block; nil stays nil (no egress).
func decodeEgress(w *egressWire) (*Egress, error) {
	if w == nil {
		return nil, nil
	}
	if w.Allow == nil {
		return nil, fmt.Errorf("egress.allow is missing")
	}
	if err := checkNames("egress.allow", "hosts", w.Allow, MaxEgressHosts, ValidHost, "a lower-case host name"); err != nil {
		return nil, err
	}
	e := &Egress{Allow: w.Allow}
	if w.MaxBytes != nil {
		if *w.MaxBytes < 1 || *w.MaxBytes > maxVersion {
			return nil, fmt.Errorf("egress.max_bytes outside 1..2^53")
		}
		e.MaxBytes = *w.MaxBytes
	}
	if w.Lockfile != nil {
		if *w.Lockfile != LockfileBound {
			return nil, fmt.Errorf("egress.lockfile must be %q", LockfileBound)
		}
		e.Lockfile = *w.Lockfile
	}
	return e, nil
}

// ValidHost reports whether h is a host name an allow list may hold: lower
// case letters, digits and hyphens in dot-separated labels of 1..63
// bytes, not starting or ending with a hyphen, at least two labels, the
// last not all digits, and not an IP literal. A name is compared byte for
// byte with what a request names, so only this one spelling is admitted.
func ValidHost(h string) bool {
	if h == "" || len(h) > maxHostLen || !strings.Contains(h, ".") {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}
