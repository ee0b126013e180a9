package ledger

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

func chain(t testing.TB, ep uuid.UUID, n int) []Entry {
	t.Helper()
	var head Head
	at := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	out := make([]Entry, 0, n)
	for i := 0; i < n; i++ {
		e, err := Seal(head, ep, 1+int64(i/3), "effect_transition", at.Add(time.Duration(i)*time.Millisecond),
			map[string]any{"i": i, "z": "last", "a": []any{1.5, "x", nil}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		head = Head{Seq: e.Seq, Hash: e.Hash}
	}
	return out
}

func headOf(es []Entry) *Head {
	if len(es) == 0 {
		return &Head{}
	}
	l := es[len(es)-1]
	return &Head{Seq: l.Seq, Hash: l.Hash}
}

func TestVerifyIntactChain(t *testing.T) {
	ep := uuid.New()
	es := chain(t, ep, 10)
	r := Verify(ep, es, headOf(es))
	if !r.OK() || r.Entries != 10 || r.Head.Seq != 10 {
		t.Fatalf("intact chain: %+v", r)
	}
	if r := Verify(ep, nil, &Head{}); !r.OK() {
		t.Fatalf("empty chain: %+v", r.Broken)
	}
}

func TestVerifyFindsFirstBrokenLink(t *testing.T) {
	ep := uuid.New()
	cases := []struct {
		name   string
		mutate func([]Entry) []Entry
		head   func(orig []Entry) *Head
		want   int64
	}{
		{"edit body", func(es []Entry) []Entry { es[4].Body = json.RawMessage(`{"i":99}`); return es }, nil, 5},
		{"edit epoch", func(es []Entry) []Entry { es[2].Epoch = 7; return es }, nil, 3},
		{"edit kind", func(es []Entry) []Entry { es[0].Kind = "x"; return es }, nil, 1},
		{"edit time", func(es []Entry) []Entry { es[6].At = es[6].At.Add(time.Microsecond); return es }, nil, 7},
		{"non-canonical body", func(es []Entry) []Entry { es[3].Body = json.RawMessage(`{ "i":3}`); return es }, nil, 4},
		{"delete middle", func(es []Entry) []Entry { return append(es[:5:5], es[6:]...) }, nil, 6},
		{"delete tail", func(es []Entry) []Entry { return es[:9] }, headOf, 10},
		{"extra tail", func(es []Entry) []Entry { return es }, func(o []Entry) *Head { return headOf(o[:8]) }, 9},
		{"swap rows", func(es []Entry) []Entry { es[3], es[4] = es[4], es[3]; return es }, nil, 4},
		{"swap seq numbers", func(es []Entry) []Entry {
			es[3], es[4] = es[4], es[3]
			es[3].Seq, es[4].Seq = 4, 5
			return es
		}, nil, 4},
		{"rehash edited row", func(es []Entry) []Entry {
			// An attacker who recomputes the edited row's hash still
			// breaks the next link.
			es[4].Body = json.RawMessage(`{"i":99}`)
			es[4].Hash, _ = Compute(es[4])
			return es
		}, nil, 6},
		{"foreign episode", func(es []Entry) []Entry { es[1].EpisodeID = uuid.New(); return es }, nil, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := chain(t, ep, 10)
			es := tc.mutate(append([]Entry(nil), orig...))
			var h *Head
			if tc.head != nil {
				h = tc.head(orig)
			}
			r := Verify(ep, es, h)
			if r.OK() {
				t.Fatal("tampering not detected")
			}
			if r.Broken.Seq != tc.want {
				t.Fatalf("broken at %d (%s), want %d", r.Broken.Seq, r.Broken.Reason, tc.want)
			}
		})
	}
}

func TestCanonicalizeObjectRefuses(t *testing.T) {
	for _, in := range []string{`[]`, `1`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `{} {}`, `{`, ``} {
		if _, err := CanonicalizeObject([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	got, err := CanonicalizeObject([]byte(`{"b":1.0,"a":"\u00e9"}`))
	if err != nil || string(got) != `{"a":"é","b":1}` {
		t.Fatalf("got %s, %v", got, err)
	}
}

// A fixed vector (cross-checked with an independent Python json.dumps
// sort_keys computation) pins the envelope: changing field names, time format or
// the domain tag would silently invalidate every stored ledger.
func TestHashIsStable(t *testing.T) {
	ep := uuid.MustParse("0192f0a0-0000-7000-8000-000000000001")
	e, err := Seal(Head{}, ep, 1, "episode_created", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	const want = "72ec64df25a4dcade3642a8b58cdf9d17dd0aba9c02f660aa37fec3a5d333b7e"
	if got := e.Hash.String(); got != want {
		t.Logf("hash %s", got)
		t.Fatalf("envelope hash changed")
	}
}

func FuzzCanonicalizeObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2,{"b":null}]}`, `{"n":1e21,"m":-0.0}`, `{"s":"\ud800"}`, `{"a":1,"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := CanonicalizeObject(raw)
		if err != nil {
			return
		}
		again, err := CanonicalizeObject(out)
		if err != nil {
			t.Fatalf("canonical output refused: %v", err)
		}
		if string(again) != string(out) {
			t.Fatalf("not idempotent: %s vs %s", out, again)
		}
	})
}

// FuzzVerify: any single-byte change to any entry's body is detected, and
// Verify never panics on arbitrary content.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"x":1}`), uint8(0), uint8(0))
	f.Add([]byte(`{"a":"b","c":[true,false]}`), uint8(3), uint8(5))
	f.Fuzz(func(t *testing.T, body []byte, which, pos uint8) {
		ep := uuid.MustParse("0192f0a0-0000-7000-8000-000000000002")
		var head Head
		var es []Entry
		for i := 0; i < 4; i++ {
			canon, err := CanonicalizeObject(body)
			if err != nil {
				return
			}
			e := Entry{EpisodeID: ep, Seq: int64(i + 1), Epoch: 1, Kind: "k", Body: canon,
				At: time.Unix(int64(i), 0).UTC(), Prev: head.Hash}
			if e.Hash, err = Compute(e); err != nil {
				t.Fatal(err)
			}
			es = append(es, e)
			head = Head{Seq: e.Seq, Hash: e.Hash}
		}
		if r := Verify(ep, es, &head); !r.OK() {
			t.Fatalf("intact chain broken: %+v", r.Broken)
		}
		i := int(which) % len(es)
		b := append([]byte(nil), es[i].Body...)
		b[int(pos)%len(b)] ^= 0x01
		es[i].Body = b
		r := Verify(ep, es, &head)
		if r.OK() || r.Broken.Seq != int64(i+1) {
			t.Fatalf("flip in entry %d: %+v", i+1, r.Broken)
		}
	})
}

// FuzzEnvelope: the direct envelope encoding equals marshal-then-RFC 8785
// for any kind, sequence, epoch and canonical body.
func FuzzEnvelope(f *testing.F) {
	f.Add("effect_transition", int64(1), int64(1), []byte(`{"a":1}`))
	f.Add("k\"\\\x00\x1f\x7f\u2028é\n", int64(-5), int64(1<<53), []byte(`{"s":"\u00e9\n"}`))
	f.Add("x", int64(1<<62), int64(0), []byte(`{}`))
	f.Fuzz(func(t *testing.T, kind string, seq, epoch int64, body []byte) {
		canon, err := CanonicalizeObject(body)
		if err != nil {
			return
		}
		e := Entry{EpisodeID: uuid.MustParse("0192f0a0-0000-7000-8000-000000000003"), Seq: seq, Epoch: epoch,
			Kind: kind, Body: canon, At: time.Unix(seq%1e9, epoch%1e6*1000).UTC(), Prev: Hash{1, 2, 3}}
		fast, err1 := envelopeJSON(e)
		slow, err2 := envelopeJCS(e)
		if err1 != nil || err2 != nil {
			if utf8.ValidString(kind) && err2 == nil {
				t.Fatalf("fast path failed: %v", err1)
			}
			return
		}
		if string(fast) != string(slow) {
			t.Fatalf("envelopes differ:\nfast %s\njcs  %s", fast, slow)
		}
	})
}
