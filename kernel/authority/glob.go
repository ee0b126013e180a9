package authority

import (
	"fmt"
	"path"
	"strings"
)

// Limits on what a capability may contain. They bound the work of one
// Check, so a hostile or careless policy cannot make the hot path slow.
const (
	MaxPathLen     = 4096 // bytes of one requested path
	MaxGlobLen     = 256  // bytes of one glob
	MaxGlobs       = 64   // globs in one allow or forbid list
	MaxClauses     = 8    // allow clauses after intersection
	MaxGrants      = 64
	maxTargetIDLen = 63
)

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
// are recognised at compile time so the hot path mostly compares strings
// instead of running path.Match.
type segment struct {
	kind segKind
	text string
}

// glob is a compiled path pattern: segments are path.Match patterns, plus
// "**" for any number (including zero) of whole segments.
type glob struct {
	src  string
	segs []segment
	deep bool // has a "**" segment
	// head and tail count the segments before the first and after the last
	// "**": they are anchored to the path's ends and checked first, which
	// settles the common shapes ("lib/**", "**/*.pem") without search.
	head, tail int
}

func compileGlob(src string) (glob, error) {
	if src == "" || len(src) > MaxGlobLen {
		return glob{}, fmt.Errorf("glob length %d outside 1..%d", len(src), MaxGlobLen)
	}
	if strings.HasPrefix(src, "/") || strings.ContainsRune(src, 0) || strings.Contains(src, "\\") {
		return glob{}, fmt.Errorf("glob %q must be relative, without NUL or backslash", src)
	}
	parts := strings.Split(src, "/")
	g := glob{src: src, segs: make([]segment, 0, len(parts))}
	for _, p := range parts {
		switch {
		case p == "" || p == "." || p == "..":
			return glob{}, fmt.Errorf("glob %q has an empty, . or .. segment", src)
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
			return glob{}, fmt.Errorf("glob %q uses ** inside a segment", src)
		}
		if _, err := path.Match(p, ""); err != nil {
			return glob{}, fmt.Errorf("glob %q: %w", src, err)
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

// MaxPathSegments bounds the depth of a requested path, so a path's
// segment table fits on the stack of Check.
const MaxPathSegments = 64

// splitPath is a valid path cut into segments once, so every glob of a
// Check reuses the same cut.
type splitPath struct {
	p    string
	n    int
	ends [MaxPathSegments]uint16 // ends[i]: offset just past segment i
}

func (sp *splitPath) seg(i int) string {
	start := 0
	if i > 0 {
		start = int(sp.ends[i-1]) + 1
	}
	return sp.p[start:sp.ends[i]]
}

// split validates p and cuts it: relative, clean, bounded, no NUL or
// backslash. A path that is not in this form is refused rather than
// normalised: "lib/../.env" must not be judged by its spelling.
func (sp *splitPath) split(p string) bool {
	if p == "" || len(p) > MaxPathLen || p[0] == '/' {
		return false
	}
	sp.p, sp.n = p, 0
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			if c == 0 || c == '\\' {
				return false
			}
			if c != '/' {
				continue
			}
		}
		if sp.n == MaxPathSegments {
			return false
		}
		switch i - start {
		case 0:
			return false
		case 1:
			if p[start] == '.' {
				return false
			}
		case 2:
			if p[start] == '.' && p[start+1] == '.' {
				return false
			}
		}
		sp.ends[sp.n] = uint16(i)
		sp.n++
		start = i + 1
	}
	return true
}

func validPath(p string) bool {
	var sp splitPath
	return sp.split(p)
}

// match reports whether the split path matches g. It is the classic greedy
// wildcard algorithm over segments ("**" is the star, every other segment
// consumes exactly one name segment), so it runs in
// O(len(segs)·segments) with no recursion and no allocation.
func (g *glob) match(sp *splitPath) bool {
	segs := g.segs
	if !g.deep {
		if len(segs) != sp.n {
			return false
		}
		for i := range segs {
			if !segs[i].match(sp.seg(i)) {
				return false
			}
		}
		return true
	}
	if sp.n < g.head+g.tail {
		return false
	}
	for i := 0; i < g.head; i++ {
		if !segs[i].match(sp.seg(i)) {
			return false
		}
	}
	for i := 1; i <= g.tail; i++ {
		if !segs[len(segs)-i].match(sp.seg(sp.n - i)) {
			return false
		}
	}
	// What is left starts and ends with "**".
	segs = segs[g.head : len(segs)-g.tail]
	pi, ni, end := 0, g.head, sp.n-g.tail // pattern index; name segment index and bound
	starPi, starNi := -1, 0
	for ni < end {
		if pi < len(segs) && segs[pi].kind == segAnyDeep {
			starPi, starNi = pi, ni
			pi++
			continue
		}
		if pi < len(segs) && segs[pi].match(sp.seg(ni)) {
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
