package episode

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestOutcomeFitsTheStore: every outcome encodes within the store's 256
// byte reason and reads back as itself (its reason cut to fit); an
// operator's reason is no outcome.
func TestOutcomeFitsTheStore(t *testing.T) {
	long := strings.Repeat("é", 400)
	for _, o := range []Outcome{
		{Kind: OutcomeLanded, Ref: "refs/heads/main", Commit: strings.Repeat("a", 64), Effect: uuid.NewString()},
		// The longest ref a spec may name, with a SHA-256 commit.
		{Kind: OutcomeLanded, Ref: "refs/" + strings.Repeat("h", 91), Commit: strings.Repeat("a", 64), Effect: uuid.NewString()},
		// ... and what the harvest left out.
		{Kind: OutcomeLanded, Ref: "refs/" + strings.Repeat("h", 91), Commit: strings.Repeat("a", 64), Effect: uuid.NewString(),
			Ignored: 1 << 30, IgnoredSample: []string{strings.Repeat("n", 200), "b", "c"}},
		{Kind: OutcomeDenied, Code: "forbidden", Reason: "harvest: " + long, Ignored: 20000, IgnoredSample: []string{"node_modules", "x"}},
		{Kind: OutcomeDenied, Code: "forbidden", Effect: uuid.NewString(), Reason: "commit: " + long},
		{Kind: OutcomeNothing},
		{Kind: OutcomeWallTime, Reason: "wall time of 1h0m0s reached"},
	} {
		enc := o.encode()
		got, ok := ParseOutcome(enc)
		if len(enc) > maxReason || !ok || got.Kind != o.Kind || got.Commit != o.Commit || got.Effect != o.Effect ||
			!strings.HasPrefix(o.Reason, got.Reason) || !utf8.ValidString(got.Reason) {
			t.Errorf("%+v encodes as %q (%d bytes), reads back %+v %v", o, enc, len(enc), got, ok)
		}
	}
	for _, r := range []string{"worker committed the fix", "", `{"state":"x"}`, `{"outcome":`, `{"outcome":""}`} {
		if o, ok := ParseOutcome(r); ok {
			t.Errorf("%q read as outcome %+v", r, o)
		}
	}
}

// TestCommitMessageIsSanitised: the message is the task's, printable,
// within the adapter's cap, and never carries the trailer the adapter
// reserves for reconciliation.
func TestCommitMessageIsSanitised(t *testing.T) {
	id := uuid.New()
	intent := "Fix\x1b[31m the\x00 test\r\n\n" + broker.TrailerKey + ": " + uuid.NewString() + "\n" + strings.Repeat("word ", 2000) + "\xff"
	m := commitMessage(intent, id)
	if len(m) > 4096-100 || !utf8.ValidString(m) || strings.Contains(m, broker.TrailerKey+":") || strings.ContainsAny(m, "\x00\x1b\r") {
		t.Fatalf("message (%d bytes):\n%q", len(m), m)
	}
	if subject, _, _ := strings.Cut(m, "\n"); subject != "Fix[31m the test" {
		t.Errorf("subject %q", subject)
	}
	if !strings.Contains(m, id.String()) {
		t.Error("the message does not name the episode")
	}
	if s, _, _ := strings.Cut(commitMessage(strings.Repeat("x", 100), id), "\n"); len([]rune(s)) > 72 {
		t.Errorf("subject of %d runes", len([]rune(s)))
	}
	if s, _, _ := strings.Cut(commitMessage(" \n\t", id), "\n"); s != "Agent change" {
		t.Errorf("empty intent subject %q", s)
	}
}

// FuzzParseOutcome: any reason the store may hold reads back as an
// outcome or as none, never panics, and an outcome re-encodes within the
// store's cap as the same outcome.
func FuzzParseOutcome(f *testing.F) {
	f.Add(`{"outcome":"landed","ref":"refs/heads/main","commit":"abc","effect":"x"}`)
	f.Add(`{"outcome":"denied","code":"forbidden","reason":"harvest: the change has a FIFO"}`)
	f.Add("operator: done")
	f.Fuzz(func(t *testing.T, reason string) {
		o, ok := ParseOutcome(reason)
		if !ok {
			return
		}
		enc := o.encode()
		back, ok := ParseOutcome(enc)
		if !ok || back.Kind != o.Kind || back.Ref != o.Ref || back.Commit != o.Commit || back.Effect != o.Effect || back.Code != o.Code {
			if len(enc) <= maxReason {
				t.Fatalf("%+v re-encoded as %q reads %+v, %v", o, enc, back, ok)
			}
		}
	})
}

// TestSpecRefusesBadHarvestAndWallTime: a harvest without a target or a
// full ref, and a negative wall time, are the operator's mistakes
// (invalid_field), found before the policy is even read.
func TestSpecRefusesBadHarvestAndWallTime(t *testing.T) {
	base := Spec{OriginIntent: "x", Repo: "/r", BaseOID: strings.Repeat("a", 40), Argv: []string{"true"}}
	for name, mutate := range map[string]func(*Spec){
		"no target":      func(s *Spec) { s.Harvest = &HarvestSpec{Ref: "refs/heads/main"} },
		"short ref":      func(s *Spec) { s.Harvest = &HarvestSpec{TargetID: "repo", Ref: "main"} },
		"ref with space": func(s *Spec) { s.Harvest = &HarvestSpec{TargetID: "repo", Ref: "refs/heads/a b"} },
		"long ref":       func(s *Spec) { s.Harvest = &HarvestSpec{TargetID: "repo", Ref: "refs/" + strings.Repeat("h", 92)} },
		"bad target":     func(s *Spec) { s.Harvest = &HarvestSpec{TargetID: "Repo!", Ref: "refs/heads/main"} },
		"negative wall":  func(s *Spec) { s.WallTime = -1 },
	} {
		s := base
		mutate(&s)
		_, _, _, err := s.validate(nil)
		if err == nil || protocol.AsWire(err).Code != protocol.CodeInvalidField {
			t.Errorf("%s: %v, want invalid_field", name, err)
		}
	}
	// A good harvest passes these checks and fails only at the policy.
	s := base
	s.Harvest = &HarvestSpec{TargetID: "repo", Ref: "refs/heads/main"}
	if _, _, _, err := s.validate(nil); err == nil || protocol.AsWire(err).Code == protocol.CodeInvalidField && !strings.Contains(err.Error(), "policy") {
		t.Errorf("a good harvest: %v", err)
	}
}
