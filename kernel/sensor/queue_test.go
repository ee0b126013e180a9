package sensor

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestQueueNeverDropsCritical(t *testing.T) {
	q, err := NewQueue[int](4)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if !q.PushSemantic(100 + i) {
			t.Fatalf("semantic %d refused with room", i)
		}
	}
	if q.PushSemantic(104) {
		t.Fatal("semantic frame accepted into a full queue")
	}
	// Critical frames displace the oldest semantic frames.
	for i := 0; i < 4; i++ {
		if err := q.PushCritical(i); err != nil {
			t.Fatalf("critical %d: %v", i, err)
		}
	}
	if err := q.PushCritical(4); !errors.Is(err, ErrCriticalBacklog) {
		t.Fatalf("critical into a queue full of critical frames: %v", err)
	}
	if st := q.Stats(); st.Critical != 4 || st.Semantic != 0 || st.Dropped != 5 {
		t.Fatalf("stats %+v", st)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		x, crit, err := q.Pop(ctx)
		if err != nil || !crit || x != i {
			t.Fatalf("pop %d: %d %v %v", i, x, crit, err)
		}
	}
}

func TestQueueServesCriticalFirst(t *testing.T) {
	q, _ := NewQueue[string](8)
	q.PushSemantic("s1")
	q.PushSemantic("s2")
	q.PushCritical("c1")
	q.PushSemantic("s3")
	q.PushCritical("c2")
	want := []string{"c1", "c2", "s1", "s2", "s3"}
	for _, w := range want {
		x, _, err := q.Pop(context.Background())
		if err != nil || x != w {
			t.Fatalf("pop %q, want %q (%v)", x, w, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := q.Pop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("pop from an empty queue with a done context: %v", err)
	}
}

func TestQueueConcurrent(t *testing.T) {
	q, _ := NewQueue[int](16)
	const producers, each = 4, 500
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got sync.Map
	var consumers sync.WaitGroup
	criticalSeen := make(chan int, producers*each)
	for c := 0; c < 2; c++ {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for {
				x, crit, err := q.Pop(ctx)
				if err != nil {
					return
				}
				got.Store(x, true)
				if crit {
					criticalSeen <- x
				}
			}
		}()
	}
	var wg sync.WaitGroup
	backlog := 0
	var mu sync.Mutex
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				x := p*each + i
				if x%3 == 0 {
					if q.PushCritical(x) != nil { // a real caller would contain here
						mu.Lock()
						backlog++
						mu.Unlock()
					}
				} else {
					q.PushSemantic(x)
				}
			}
		}(p)
	}
	wg.Wait()
	// Drain: every critical frame pushed without error must come out.
	want := 0
	for x := 0; x < producers*each; x += 3 {
		want++
	}
	for n := 0; n < want-backlog; n++ {
		<-criticalSeen
	}
	cancel()
	consumers.Wait()
	st := q.Stats()
	if st.Critical != 0 {
		t.Fatalf("critical frames left behind: %+v", st)
	}
}

func TestNewQueueBounds(t *testing.T) {
	for _, c := range []int{0, -1, 1<<16 + 1} {
		if _, err := NewQueue[int](c); err == nil {
			t.Errorf("capacity %d accepted", c)
		}
	}
}
