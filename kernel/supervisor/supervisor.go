package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Child is one supervised part. Run must return when ctx ends, and call
// ready once it is serving, so the next child can rely on it.
type Child struct {
	Name string
	Run  func(ctx context.Context, ready func()) error
}

// ErrStopped is what a child that ended because the supervisor stopped it
// reports through Exit.
var ErrStopped = errors.New("supervisor: stopped")

// Exit says which child ended first, and why.
type Exit struct {
	Child string
	Err   error // nil: the child finished on its own
}

func (e *Exit) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s finished", e.Child)
	}
	return fmt.Sprintf("%s failed: %v", e.Child, e.Err)
}

func (e *Exit) Unwrap() error { return e.Err }

type result struct {
	i   int
	err error
}

// RestForOne starts children in order and blocks until one of them ends or
// ctx ends. It then stops every later child (last first), and finally the
// earlier ones, and returns the first exit (ctx's end reports ErrStopped
// for no child). A child that fails to become ready counts as ending.
func RestForOne(ctx context.Context, children ...Child) *Exit {
	n := len(children)
	cancels := make([]context.CancelFunc, n)
	done := make([]chan struct{}, n)
	results := make(chan result, n)
	started := 0
	stopFrom := func(i int) {
		for j := started - 1; j >= i; j-- {
			cancels[j]()
			<-done[j]
		}
	}
	var first *Exit
	record := func(r result) {
		if first == nil {
			first = &Exit{Child: children[r.i].Name, Err: r.err}
		}
	}
	// Children do not inherit ctx's cancellation directly: if they did, its
	// end would reach them all at once, and a domain could outlive the
	// authority it depends on by a scheduling accident. stopFrom cancels
	// them one at a time instead, newest first.
	base := context.WithoutCancel(ctx)
	for i, c := range children {
		cctx, cancel := context.WithCancel(base)
		cancels[i], done[i] = cancel, make(chan struct{})
		ready := make(chan struct{})
		signal := sync.OnceFunc(func() { close(ready) })
		started++
		go func() {
			defer close(done[i])
			err := c.Run(cctx, signal)
			results <- result{i, err}
		}()
		select {
		case <-ready:
		case r := <-results:
			record(r)
			stopFrom(0)
			return first
		case <-ctx.Done():
			stopFrom(0)
			return &Exit{Err: ErrStopped}
		}
	}
	select {
	case r := <-results:
		record(r)
		// Rest for one: everything after the child that ended goes first,
		// newest first; then the rest, so the caller sees one quiet episode.
		stopFrom(r.i + 1)
		stopFrom(0)
	case <-ctx.Done():
		stopFrom(0)
		return &Exit{Err: ErrStopped}
	}
	return first
}
