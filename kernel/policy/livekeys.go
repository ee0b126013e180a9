package policy

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/autonomic-kernel/autonomic/internal/statefile"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// KeysFileName is where keys registered at run time live under state_dir.
const KeysFileName = "policy_keys.json"

// LiveKeys is policy_keys as a running kernel holds it: the configured
// keys and those registered while it runs (autonomic key add), persisted
// under state_dir and read back at start. A reader takes a snapshot
// (Keys); Add swaps in a new set, so a check never sees one half-made.
type LiveKeys struct {
	mu    sync.Mutex // Add
	cur   atomic.Pointer[Keys]
	file  string
	added map[string]string
}

// OpenLiveKeys is the configured keys plus those registered before (a
// registered id the configuration also names is an error: say which).
func OpenLiveKeys(stateDir string, configured Keys) (*LiveKeys, error) {
	l := &LiveKeys{file: filepath.Join(stateDir, KeysFileName), added: map[string]string{}}
	b, err := os.ReadFile(l.file)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := protocol.DecodeStrict(b, &l.added); err != nil {
			return nil, fmt.Errorf("%s: %w", KeysFileName, err)
		}
	}
	added, err := ParseKeys(l.added)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeysFileName, err)
	}
	all := maps.Clone(configured)
	if all == nil {
		all = Keys{}
	}
	for id, k := range added {
		if _, ok := all[id]; ok {
			return nil, fmt.Errorf("%s registers key %q, which policy_keys also names; remove one", KeysFileName, id)
		}
		all[id] = k
	}
	l.cur.Store(&all)
	return l, nil
}

// Keys is the current set; the caller must not change it.
func (l *LiveKeys) Keys() Keys { return *l.cur.Load() }

// Add registers a key (id → standard base64 Ed25519 public key) for
// every policy verified from now on. An id already held is refused,
// whatever key it names: a key is never replaced while the kernel runs.
func (l *LiveKeys) Add(id, pub string) error {
	k, err := ParseKeys(map[string]string{id: pub})
	if err != nil {
		return protocol.Errorf(protocol.CodeInvalidField, "%v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.Keys()
	if _, ok := cur[id]; ok {
		return protocol.Errorf(protocol.CodeInvalidField, "policy key %q is registered; keys are never replaced while the kernel runs", id)
	}
	added := maps.Clone(l.added)
	added[id] = pub
	if err := statefile.WriteJSON(l.file, added); err != nil {
		return err
	}
	next := maps.Clone(cur)
	next[id] = k[id]
	l.added = added
	l.cur.Store(&next)
	return nil
}
