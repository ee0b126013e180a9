package regulator

import (
	"sync"
	"testing"
)

// TestLiveKeepsEachSourcesFaults: a source's report speaks only for its
// own faults, so the store recovering does not hide the sensor bank's
// outage; a nil Live is no regulator (act, reports change nothing); and
// concurrent reports and reads are safe (run with -race).
func TestLiveKeepsEachSourcesFaults(t *testing.T) {
	var none *Live
	none.Report(DatabaseLoss, DatabaseLoss)
	if st := none.State(); st.Level != Act || none.Ceiling() != Act.MaxClass() {
		t.Fatalf("no regulator: %+v", st)
	}
	l, err := NewLive(Config{Start: Act, Max: Act, RecoverAfter: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Report(DatabaseLoss|BrokerSaturation, DatabaseLoss)
	l.Report(SemanticOutage|UnpinnedModel, SemanticOutage)
	if st := l.State(); st.Level != Observe || st.Faults != DatabaseLoss|SemanticOutage {
		t.Fatalf("both sources degraded: %v (%v)", st.Level, st.Faults)
	}
	l.Report(DatabaseLoss|BrokerSaturation, 0)
	if st := l.State(); st.Level != Advise || st.Faults != SemanticOutage {
		t.Fatalf("store back, sensor not: %v (%v)", st.Level, st.Faults)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				l.Report(SemanticOutage|UnpinnedModel, Fault(i%2))
				_ = l.State()
			}
		}()
	}
	wg.Wait()
}
