package relay

import "time"

// Default connection bounds of one relay (Options.ReadTimeout,
// Options.IdleTimeout).
const (
	defaultReadTimeout = 2 * time.Minute
	defaultIdleTimeout = 30 * time.Second
)

// maxConns is how many connections a relay keeps open: the calls it may
// have in flight, and as many again waiting or idle.
func (o Options) maxConns() int {
	n := o.MaxConcurrent
	if n <= 0 {
		n = 8
	}
	return 2 * n
}
