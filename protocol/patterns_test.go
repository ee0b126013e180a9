package protocol

import (
	"math/rand"
	"regexp"
	"strings"
	"testing"
)

var allPatterns = map[string]pattern{
	"id": idPattern, "request_id": requestIDPattern, "env_key": envKeyPattern, "digest": digestPattern,
	"sha256_digest": sha256Digest, "uuid": uuidPattern, "kind": kindPattern, "target_id": targetIDPattern,
	"key_id": keyIDPattern, "integer": integerLiteral,
}

// patternAlphabet holds every byte the patterns treat specially and the
// neighbours of each class boundary, plus bytes no pattern admits.
const patternAlphabet = "aefglmzAFGZ0189-_.:/ \n\x00\xff\xc3\xa9s2h6"

// TestPatternsMatchTheirExpressions: each hand-written check accepts
// exactly what regexp accepts for the expression README.md states — on
// strings built from valid ones by mutation and on random ones around the
// length bounds.
func TestPatternsMatchTheirExpressions(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	valid := []string{"a", "z9-x", "A", "ab_c", "0", "-1", "10", strings.Repeat("f", 64), "sha256:" + strings.Repeat("0", 64),
		"0123abcd-ef01-2345-6789-abcdef012345", "key.id-1_x", "x" + strings.Repeat("y", 62), "R" + strings.Repeat("q", 63),
		"E" + strings.Repeat("_", 127)}
	for name, p := range allPatterns {
		re := regexp.MustCompile(p.expr)
		accepted := 0
		check := func(s string) {
			if got, want := p.MatchString(s), re.MatchString(s); got != want {
				t.Fatalf("%s: %q: check says %v, %s says %v", name, s, got, p.expr, want)
			}
			if re.MatchString(s) {
				accepted++
			}
		}
		for _, v := range valid {
			check(v)
			for range 2000 {
				b := []byte(v)
				for range 1 + rng.Intn(3) {
					switch op := rng.Intn(4); {
					case op == 0 && len(b) > 0:
						b[rng.Intn(len(b))] = patternAlphabet[rng.Intn(len(patternAlphabet))]
					case op == 1:
						i := rng.Intn(len(b) + 1)
						b = append(b[:i], append([]byte{patternAlphabet[rng.Intn(len(patternAlphabet))]}, b[i:]...)...)
					case op == 2 && len(b) > 0:
						i := rng.Intn(len(b))
						b = append(b[:i], b[i+1:]...)
					}
				}
				check(string(b))
			}
		}
		for range 20000 {
			b := make([]byte, rng.Intn(130))
			for i := range b {
				b[i] = patternAlphabet[rng.Intn(len(patternAlphabet))]
			}
			check(string(b))
		}
		if accepted < 10 {
			t.Errorf("%s: only %d accepted strings were tried", name, accepted)
		}
	}
}

// FuzzPatterns: the same equivalence under the fuzzer, for every pattern.
func FuzzPatterns(f *testing.F) {
	for _, s := range []string{"", "a", "a-", "0123abcd-ef01-2345-6789-abcdef012345", "-0", "007", "sha256:", "A_b"} {
		f.Add(s)
	}
	compiled := map[string]*regexp.Regexp{}
	for name, p := range allPatterns {
		compiled[name] = regexp.MustCompile(p.expr)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, p := range allPatterns {
			if got, want := p.MatchString(s), compiled[name].MatchString(s); got != want {
				t.Fatalf("%s: %q: check says %v, %s says %v", name, s, got, p.expr, want)
			}
		}
	})
}
