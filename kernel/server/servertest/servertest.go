// Package servertest makes test kernels' configurations: a database of its
// own on a throwaway cluster (store/storetest), the unsafe_local backend and
// the rules sensor, with whatever top-level keys a test sets instead. It
// writes the file too (0600), for tests that drive the command's --config.
package servertest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/store"
	"github.com/autonomic-kernel/autonomic/store/pgcluster"
	"github.com/autonomic-kernel/autonomic/store/storetest"
)

// Setup is one test kernel's configuration and where its database is.
type Setup struct {
	Cluster *pgcluster.Cluster
	DB      string
	Config  *config.Config
	Path    string // the file Config was loaded from
}

// New starts a cluster, creates database db on it and loads a configuration
// naming it. keys replace the defaults' top-level keys, except "store",
// whose keys are added to the URLs (an instance_id, say).
func New(t testing.TB, db string, keys map[string]any) *Setup {
	t.Helper()
	cluster := storetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	return configure(t, cluster, db, keys)
}

// Peer is another kernel's configuration on k's database, as New makes
// one: a state_dir of its own, keys replacing top-level keys. Two kernels
// on one database need distinct store instance ids.
func (k *Setup) Peer(t testing.TB, keys map[string]any) *Setup {
	t.Helper()
	return configure(t, k.Cluster, k.DB, keys)
}

func configure(t testing.TB, cluster *pgcluster.Cluster, db string, keys map[string]any) *Setup {
	t.Helper()
	st := map[string]any{"url": cluster.KernelConnString(db), "admin_url": cluster.AdminConnString(db)}
	doc := map[string]any{
		"state_dir": t.TempDir(),
		"store":     st,
		"domain":    map[string]any{"backend": "unsafe_local"},
		"sensor":    map[string]any{"kind": "rules"},
	}
	for k, v := range keys {
		if extra, ok := v.(map[string]any); ok && k == "store" {
			for sk, sv := range extra {
				st[sk] = sv
			}
			continue
		}
		doc[k] = v
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "autonomic.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return &Setup{Cluster: cluster, DB: db, Config: cfg, Path: path}
}

// SeedEffect makes, directly in the store at url, an active episode with
// one proposed git_commit effect, and returns the open store with them.
func SeedEffect(t testing.TB, ctx context.Context, url string) (*store.Postgres, store.Episode, store.Effect) {
	t.Helper()
	return SeedEffectWith(t, ctx, url, "sha256:"+strings.Repeat("ab", 32), `{}`)
}

// SeedEffectWith is SeedEffect for an effect with the given payload
// digest and target document.
func SeedEffectWith(t testing.TB, ctx context.Context, url, digest, target string) (*store.Postgres, store.Episode, store.Effect) {
	t.Helper()
	st, err := store.Open(ctx, store.Config{URL: url, InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ep, err := st.CreateEpisode(ctx, store.NewEpisode{Spec: []byte(`{"origin_intent":"x"}`), PolicyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := st.GrantLease(ctx, store.LeaseGrant{EpisodeID: ep.ID, Epoch: 1, Capabilities: []byte(`{}`), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	eff, err := st.ProposeEffect(ctx, store.Proposal{EpisodeID: ep.ID, Epoch: 1, LeaseID: lease.ID, Kind: "git_commit", Class: 3,
		TargetID: "repo", Target: []byte(target), PayloadDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	return st, ep, eff
}
