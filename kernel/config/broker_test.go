package config

import (
	"errors"
	"fmt"
	"testing"
)

// TestBrokerBounds pins each broker bound's range, its message and its
// default, and the git_remote keys' checks.
func TestBrokerBounds(t *testing.T) {
	const base = `"state_dir":"/s","domain":{"backend":"linux"},"sensor":{"kind":"rules"}`
	for _, b := range []struct {
		key    string
		lo, hi int
	}{
		{"max_patch_result_bytes", 1024, 1 << 32}, {"git_memory_bytes", 64 << 20, 1 << 36}, {"git_timeout_ms", 1000, 600000},
		{"git_max_output_bytes", 64 << 10, 1 << 30}, {"prepares_per_episode", 1, 1 << 30}, {"prepares_per_minute", 1, 1 << 20},
		{"payload_bytes_per_episode", 1 << 20, 1 << 40}, {"payload_retention_hours", 1, 24 * 3650}, {"disk_reserve_bytes", 0, 1 << 50},
	} {
		t.Run(b.key, func(t *testing.T) {
			doc := func(v int) []byte { return []byte(fmt.Sprintf(`{%s,"broker":{%q:%d}}`, base, b.key, v)) }
			below := b.lo - 1
			if below == 0 {
				below = -1
			}
			for _, v := range []int{below, b.hi + 1} {
				_, err := Parse(doc(v))
				var ce *Error
				if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Key != "broker."+b.key ||
					ce.Problems[0].Problem != fmt.Sprintf("must be %d..%d", b.lo, b.hi) {
					t.Errorf("%d: %v", v, err)
				}
			}
			for _, v := range []int{b.lo, b.hi} {
				if _, err := Parse(doc(v)); err != nil {
					t.Errorf("%d refused: %v", v, err)
				}
			}
		})
	}
	c, err := Parse([]byte("{" + base + "}"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Broker.MaxPatchResultBytes != DefaultMaxPatchResultBytes || c.Broker.GitMemoryBytes != DefaultGitMemoryBytes ||
		c.Broker.GitTimeoutMS != DefaultGitTimeoutMS || c.Broker.GitMaxOutputBytes != DefaultGitMaxOutputBytes ||
		c.Broker.PreparesPerEpisode != DefaultPreparesPerEpisode || c.Broker.PreparesPerMinute != DefaultPreparesPerMinute ||
		c.Broker.PayloadBytesPerEpisode != DefaultPayloadBytesPerEpisode || c.Broker.PayloadRetentionHours != DefaultPayloadRetentionHours ||
		c.Broker.DiskReserveBytesValue() != DefaultDiskReserveBytes {
		t.Fatalf("defaults: %+v", c.Broker)
	}
	if c, err := Parse([]byte("{" + base + `,"broker":{"disk_reserve_bytes":0}}`)); err != nil || c.Broker.DiskReserveBytesValue() != 0 {
		t.Fatalf("a present zero reserve: %v", err)
	}
	_, err = Parse([]byte("{" + base + `,"targets":{"git_remote":{"pub":{"repo":"/r","url":"https://h/x.git","allowed_refs":["refs/heads/main"],
		"source_refs":["main"],"rewind_refs":["HEAD"],"credential_env":"lower case","ca_file":"rel/ca.pem"}}}}`))
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 4 {
		t.Fatalf("git_remote keys: %v", err)
	}
	for i, k := range []string{"ca_file", "credential_env", "rewind_refs", "source_refs"} {
		if ce.Problems[i].Key != "targets.git_remote.pub."+k {
			t.Errorf("problem %d: %v, want %s", i, ce.Problems[i], k)
		}
	}
}
