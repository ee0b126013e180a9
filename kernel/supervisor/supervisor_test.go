package supervisor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(s string) { j.mu.Lock(); j.log = append(j.log, s); j.mu.Unlock() }

// child serves until ctx ends (or fail is closed), journaling its stop.
func child(j *journal, name string, fail <-chan struct{}) Child {
	return Child{Name: name, Run: func(ctx context.Context, ready func()) error {
		j.add("start " + name)
		ready()
		select {
		case <-ctx.Done():
			j.add("stop " + name)
			return ErrStopped
		case <-fail:
			j.add("fail " + name)
			return errors.New("broken")
		}
	}}
}

// TestRestForOne: when the middle child fails, the one after it is stopped
// before anything else, then the one before it; the exit names the failure.
func TestRestForOne(t *testing.T) {
	j := &journal{}
	fail := make(chan struct{})
	never := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(fail) }()
	exit := RestForOne(context.Background(), child(j, "authority", never), child(j, "broker", fail), child(j, "domain", never))
	if exit.Child != "broker" || exit.Err == nil {
		t.Fatalf("exit = %+v", exit)
	}
	want := []string{"start authority", "start broker", "start domain", "fail broker", "stop domain", "stop authority"}
	if !slices.Equal(j.log, want) {
		t.Fatalf("order = %v, want %v", j.log, want)
	}
}

// TestFirstChildTakesEveryoneDown: the authority failing stops the rest,
// newest first.
func TestFirstChildTakesEveryoneDown(t *testing.T) {
	j := &journal{}
	fail := make(chan struct{})
	never := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(fail) }()
	exit := RestForOne(context.Background(), child(j, "authority", fail), child(j, "broker", never), child(j, "domain", never))
	want := []string{"start authority", "start broker", "start domain", "fail authority", "stop domain", "stop broker"}
	if exit.Child != "authority" || !slices.Equal(j.log, want) {
		t.Fatalf("exit %+v, order %v", exit, j.log)
	}
}

// TestNotReadyStopsTheStart: a child that ends before ready keeps the later
// ones from starting at all.
func TestNotReadyStopsTheStart(t *testing.T) {
	j := &journal{}
	never := make(chan struct{})
	bad := Child{Name: "broker", Run: func(context.Context, func()) error { j.add("broker refused"); return errors.New("no socket") }}
	exit := RestForOne(context.Background(), child(j, "authority", never), bad, child(j, "domain", never))
	want := []string{"start authority", "broker refused", "stop authority"}
	if exit.Child != "broker" || !slices.Equal(j.log, want) {
		t.Fatalf("exit %+v, order %v", exit, j.log)
	}
}

func TestContextEndStopsAllInReverse(t *testing.T) {
	j := &journal{}
	never := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	exit := RestForOne(ctx, child(j, "a", never), child(j, "b", never))
	if !errors.Is(exit.Err, ErrStopped) {
		t.Fatalf("exit %+v", exit)
	}
	if want := []string{"start a", "start b", "stop b", "stop a"}; !slices.Equal(j.log, want) {
		t.Fatalf("log %v", j.log)
	}
}
