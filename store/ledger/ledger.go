package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/gowebpki/jcs"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// Version is the envelope version mixed into every hash. Bump it (and keep
// verifying the old one) if the envelope ever changes.
const Version = 1

// Hash is a SHA-256 digest.
type Hash [32]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Entry is one ledger row.
type Entry struct {
	EpisodeID uuid.UUID
	Seq       int64
	Epoch     int64
	Kind      string
	// Body is canonical JSON (RFC 8785) of a JSON object.
	Body json.RawMessage
	// At is stored with microsecond precision (PostgreSQL's); Seal
	// truncates it so that what is hashed is what is stored.
	At   time.Time
	Prev Hash
	Hash Hash
}

// Head is the position of a chain's last entry. The zero Head is the empty
// chain: its hash is the all-zero genesis hash.
type Head struct {
	Seq  int64
	Hash Hash
}

// Canonical returns the RFC 8785 form of v's JSON encoding. v must encode
// to a JSON object.
func Canonical(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("ledger: encoding body: %w", err)
	}
	return CanonicalizeObject(raw)
}

// CanonicalizeObject decodes raw JSON and returns its canonical form. It
// refuses anything that is not a single JSON object, and duplicate keys
// (which canonicalisation would otherwise resolve silently).
func CanonicalizeObject(raw []byte) (json.RawMessage, error) {
	if err := CheckObject(raw); err != nil {
		return nil, err
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("ledger: canonicalising body: %w", err)
	}
	return out, nil
}

// CheckObject requires raw to be exactly one JSON object without duplicate
// keys at any depth, nested at most 64 deep: protocol.CheckShape, the
// project's one strict-JSON reader, with the ledger's bounds.
func CheckObject(raw []byte) error {
	if err := protocol.CheckShape(raw, bodyLimits); err != nil {
		return fmt.Errorf("ledger: body: %w", err)
	}
	return nil
}

// bodyLimits: nesting as the ledger has always allowed; the node count is
// bounded by the body's size, which the store caps.
var bodyLimits = protocol.Limits{MaxDepth: 64, MaxNodes: math.MaxInt}

// envelope is what is hashed. Field names are fixed forever for Version 1.
type envelope struct {
	V         int             `json:"v"`
	EpisodeID string          `json:"episode_id"`
	Seq       int64           `json:"seq"`
	Epoch     int64           `json:"epoch"`
	Kind      string          `json:"kind"`
	At        string          `json:"at"`
	Body      json.RawMessage `json:"body"`
	Prev      string          `json:"prev"`
}

// domainTag separates ledger hashes from every other SHA-256 the system
// computes, so a ledger hash can never be replayed as, say, a payload
// digest.
const domainTag = "autonomic.ledger.v1\n"

// Compute returns the hash e should carry. e.Body must be canonical.
func Compute(e Entry) (Hash, error) {
	canon, err := envelopeJSON(e)
	if err != nil {
		return Hash{}, err
	}
	h := sha256.New()
	h.Write([]byte(domainTag))
	h.Write(canon)
	var out Hash
	copy(out[:], h.Sum(nil))
	return out, nil
}

// envelopeJSON is the RFC 8785 form of e's envelope. Every append and every
// verification computes it, so it is written out directly rather than
// marshalled and re-parsed: the keys are fixed (here in canonical order),
// the body is already canonical (Seal produces it so, Verify refuses a body
// that is not before hashing), and only kind is free text. Integers beyond
// 2^53, where RFC 8785's IEEE-754 numbers would round, take the general
// path. FuzzEnvelope holds the two paths equal.
func envelopeJSON(e Entry) ([]byte, error) {
	const exact = 1 << 53
	if e.Seq > exact || e.Seq < -exact || e.Epoch > exact || e.Epoch < -exact || !utf8.ValidString(e.Kind) {
		return envelopeJCS(e)
	}
	b := make([]byte, 0, 192+len(e.Body)+len(e.Kind))
	b = append(b, `{"at":"`...)
	b = e.At.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
	b = append(b, `","body":`...)
	b = append(b, e.Body...)
	b = append(b, `,"episode_id":"`...)
	b = append(b, e.EpisodeID.String()...)
	b = append(b, `","epoch":`...)
	b = strconv.AppendInt(b, e.Epoch, 10)
	b = append(b, `,"kind":`...)
	b = appendJCSString(b, e.Kind)
	b = append(b, `,"prev":"`...)
	b = append(b, e.Prev.String()...)
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"v":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, '}')
	return b, nil
}

// appendJCSString appends s as RFC 8785 (ECMAScript JSON.stringify) writes
// a string: only '"', '\\' and control characters are escaped, the latter
// as \b \t \n \f \r or \u00xx in lower-case hex; everything else is
// literal UTF-8.
func appendJCSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// envelopeJCS is the general path: marshal, then canonicalise.
func envelopeJCS(e Entry) ([]byte, error) {
	env, err := json.Marshal(envelope{
		V:         Version,
		EpisodeID: e.EpisodeID.String(),
		Seq:       e.Seq,
		Epoch:     e.Epoch,
		Kind:      e.Kind,
		At:        e.At.UTC().Format("2006-01-02T15:04:05.000000Z"),
		Body:      e.Body,
		Prev:      e.Prev.String(),
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: encoding envelope: %w", err)
	}
	canon, err := jcs.Transform(env)
	if err != nil {
		return nil, fmt.Errorf("ledger: canonicalising envelope: %w", err)
	}
	return canon, nil
}

// Seal makes the entry that follows head: it sets Seq, Prev and Hash and
// truncates At to what the database stores. body is canonicalised.
func Seal(head Head, episodeID uuid.UUID, epoch int64, kind string, at time.Time, body map[string]any) (Entry, error) {
	// A Go map marshals to an object without duplicate keys, so the
	// admission walk CanonicalizeObject does for foreign input is skipped.
	raw, err := json.Marshal(body)
	if err != nil {
		return Entry{}, fmt.Errorf("ledger: encoding body: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return Entry{}, fmt.Errorf("ledger: canonicalising body: %w", err)
	}
	e := Entry{
		EpisodeID: episodeID,
		Seq:       head.Seq + 1,
		Epoch:     epoch,
		Kind:      kind,
		Body:      canon,
		At:        at.UTC().Truncate(time.Microsecond),
		Prev:      head.Hash,
	}
	if e.Hash, err = Compute(e); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// Break names the first entry at which a chain fails to verify.
type Break struct {
	Seq    int64  // the sequence number the chain expected at this point
	Reason string // fixed text, never row content
}

func (b *Break) Error() string { return fmt.Sprintf("ledger broken at seq %d: %s", b.Seq, b.Reason) }

// Report is the outcome of Verify.
type Report struct {
	Entries int
	Head    Head   // the last entry that verified
	Broken  *Break // nil when the whole chain verifies
}

// OK reports whether the chain verified.
func (r Report) OK() bool { return r.Broken == nil }

// Verify walks entries (in the order read, which should be by Seq) for
// episodeID and reports the first broken link. When recorded is non-nil it
// is the head the store recorded alongside the chain; a chain that stops
// short of it (a deleted tail) or runs past it is broken too.
func Verify(episodeID uuid.UUID, entries []Entry, recorded *Head) Report {
	var r Report
	for i, e := range entries {
		want := int64(i) + 1
		brk := func(reason string) Report {
			r.Broken = &Break{Seq: want, Reason: reason}
			return r
		}
		if e.EpisodeID != episodeID {
			return brk("entry belongs to another episode")
		}
		if e.Seq != want {
			return brk("sequence gap or reordering")
		}
		if e.Prev != r.Head.Hash {
			return brk("previous-hash link does not match the preceding entry")
		}
		canon, err := CanonicalizeObject(e.Body)
		if err != nil || !bytes.Equal(canon, e.Body) {
			return brk("body is not canonical JSON")
		}
		h, err := Compute(e)
		if err != nil || h != e.Hash {
			return brk("content does not match its hash")
		}
		r.Entries++
		r.Head = Head{Seq: e.Seq, Hash: e.Hash}
	}
	if recorded != nil && *recorded != r.Head {
		switch {
		case recorded.Seq > r.Head.Seq:
			r.Broken = &Break{Seq: r.Head.Seq + 1, Reason: "entries missing before the recorded head"}
		case recorded.Seq < r.Head.Seq:
			r.Broken = &Break{Seq: recorded.Seq + 1, Reason: "entries beyond the recorded head"}
		default:
			r.Broken = &Break{Seq: recorded.Seq, Reason: "last entry differs from the recorded head"}
		}
	}
	return r
}
