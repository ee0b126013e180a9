package pathglob

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Limits bound the work of one match.
const (
	MaxPathLen  = 4096 // bytes of one path
	MaxGlobLen  = 256  // bytes of one glob
	MaxSegments = 64   // segments of one path
)

// ErrMalformed is wrapped by every Compile refusal.
var ErrMalformed = errors.New("malformed glob")

type segKind uint8

const (
	segLiteral  segKind = iota // exact text
	segAnyDeep                 // "**": zero or more whole segments
	segAny                     // "*": exactly one segment
	segPrefix                  // "lit*"
	segSuffix                  // "*lit"
	segContains                // "*lit*"
	segPattern                 // anything else path.Match understands
)

// segment is one compiled '/'-separated piece of a glob. The common shapes
// are recognised at compile time so matching mostly compares strings
// instead of running path.Match.
type segment struct {
	kind segKind
	text string
}

// Glob is a compiled path pattern. The zero Glob matches nothing.
type Glob struct {
	src  string
	segs []segment
	deep bool // has a "**" segment
	// head and tail count the segments before the first and after the last
	// "**": they are anchored to the path's ends and checked first, which
	// settles the common shapes ("lib/**", "**/*.pem") without search.
	head, tail int
}

// String is the glob as written.
func (g *Glob) String() string { return g.src }

// Compile checks and compiles a glob.
func Compile(src string) (Glob, error) {
	return compile(src, src)
}

// CompileFolded compiles the folded form of src (see Fold); match it
// against folded paths. String still returns src.
func CompileFolded(src string) (Glob, error) {
	if _, err := Compile(src); err != nil {
		return Glob{}, err
	}
	return compile(src, FoldString(src))
}

func compile(src, text string) (Glob, error) {
	bad := func(why string) (Glob, error) { return Glob{}, fmt.Errorf("%w %q: %s", ErrMalformed, src, why) }
	if text == "" || len(text) > MaxGlobLen {
		return bad(fmt.Sprintf("length outside 1..%d", MaxGlobLen))
	}
	if strings.HasPrefix(text, "/") || strings.ContainsRune(text, 0) || strings.Contains(text, "\\") {
		return bad("must be relative, without NUL or backslash")
	}
	if !printable(text) {
		return bad("has a control or invisible character")
	}
	parts := strings.Split(text, "/")
	g := Glob{src: src, segs: make([]segment, 0, len(parts))}
	for _, p := range parts {
		switch {
		case p == "" || p == "." || p == "..":
			return bad("has an empty, . or .. segment")
		case p == "**":
			// Consecutive "**" mean the same as one.
			if n := len(g.segs); n > 0 && g.segs[n-1].kind == segAnyDeep {
				continue
			}
			g.segs = append(g.segs, segment{kind: segAnyDeep})
			g.deep = true
			continue
		case strings.Contains(p, "**"):
			// "a**b" is "a*b" to path.Match; refusing it keeps the meaning
			// of "**" (whole segments) unambiguous to whoever wrote it.
			return bad("uses ** inside a segment")
		}
		if _, err := path.Match(p, ""); err != nil {
			return bad("segment " + fmt.Sprintf("%q", p) + " is not a valid pattern")
		}
		g.segs = append(g.segs, classify(p))
	}
	if g.deep {
		for g.segs[g.head].kind != segAnyDeep {
			g.head++
		}
		for g.segs[len(g.segs)-1-g.tail].kind != segAnyDeep {
			g.tail++
		}
	}
	return g, nil
}

// Valid reports whether src compiles.
func Valid(src string) error {
	_, err := Compile(src)
	return err
}

func classify(p string) segment {
	const meta = `*?[\`
	if !strings.ContainsAny(p, meta) {
		return segment{kind: segLiteral, text: p}
	}
	if p == "*" {
		return segment{kind: segAny}
	}
	inner := func(s string) bool { return s != "" && !strings.ContainsAny(s, meta) }
	n := len(p)
	switch {
	case n > 2 && p[0] == '*' && p[n-1] == '*' && inner(p[1:n-1]):
		return segment{kind: segContains, text: p[1 : n-1]}
	case p[0] == '*' && inner(p[1:]):
		return segment{kind: segSuffix, text: p[1:]}
	case p[n-1] == '*' && inner(p[:n-1]):
		return segment{kind: segPrefix, text: p[:n-1]}
	}
	return segment{kind: segPattern, text: p}
}

func (s *segment) match(name string) bool {
	switch s.kind {
	case segLiteral:
		return name == s.text
	case segAny:
		return true // segments of a valid path are never empty
	case segPrefix:
		return strings.HasPrefix(name, s.text)
	case segSuffix:
		return strings.HasSuffix(name, s.text)
	case segContains:
		return strings.Contains(name, s.text)
	case segPattern:
		ok, err := path.Match(s.text, name)
		return err == nil && ok
	}
	return false
}

// Match reports whether the split path p matches g. It is the classic
// greedy wildcard algorithm over segments ("**" is the star, every other
// segment consumes exactly one name segment).
func (g *Glob) Match(p *Path) bool {
	segs := g.segs
	if len(segs) == 0 || p.n == 0 {
		return false
	}
	if !g.deep {
		if len(segs) != p.n {
			return false
		}
		for i := range segs {
			if !segs[i].match(p.Seg(i)) {
				return false
			}
		}
		return true
	}
	if p.n < g.head+g.tail {
		return false
	}
	for i := 0; i < g.head; i++ {
		if !segs[i].match(p.Seg(i)) {
			return false
		}
	}
	for i := 1; i <= g.tail; i++ {
		if !segs[len(segs)-i].match(p.Seg(p.n - i)) {
			return false
		}
	}
	// What is left starts and ends with "**".
	segs = segs[g.head : len(segs)-g.tail]
	pi, ni, end := 0, g.head, p.n-g.tail // pattern index; name segment index and bound
	starPi, starNi := -1, 0
	for ni < end {
		if pi < len(segs) && segs[pi].kind == segAnyDeep {
			starPi, starNi = pi, ni
			pi++
			continue
		}
		if pi < len(segs) && segs[pi].match(p.Seg(ni)) {
			pi++
			ni++
			continue
		}
		if starPi < 0 {
			return false
		}
		// Let the last "**" absorb one more name segment and retry.
		starNi++
		pi, ni = starPi+1, starNi
	}
	for pi < len(segs) && segs[pi].kind == segAnyDeep {
		pi++
	}
	return pi == len(segs)
}

// MatchString splits name and matches it; an invalid name matches nothing.
func (g *Glob) MatchString(name string) bool {
	var p Path
	return p.Split(name) && g.Match(&p)
}
