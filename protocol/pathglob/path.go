package pathglob

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Path is a valid path cut into segments once, so every glob of a check
// reuses the same cut. It lives on the caller's stack.
type Path struct {
	p    string
	n    int
	ends [MaxSegments]uint16 // ends[i]: offset just past segment i
}

// String is the path as split.
func (p *Path) String() string { return p.p }

// Len is the number of segments.
func (p *Path) Len() int { return p.n }

// Seg is segment i.
func (p *Path) Seg(i int) string {
	start := 0
	if i > 0 {
		start = int(p.ends[i-1]) + 1
	}
	return p.p[start:p.ends[i]]
}

// Split validates s and cuts it: relative, clean, bounded, no NUL or
// backslash, every name printable. A path not in this form is refused
// rather than normalised: "lib/../.env" must not be judged by its spelling.
func (p *Path) Split(s string) bool {
	if s == "" || len(s) > MaxPathLen || s[0] == '/' {
		return false
	}
	p.p, p.n = s, 0
	start := 0
	ascii := true
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			c := s[i]
			if c < 0x20 || c == 0x7f || c == '\\' {
				return false
			}
			if c >= utf8.RuneSelf {
				ascii = false
			}
			if c != '/' {
				continue
			}
		}
		if p.n == MaxSegments {
			return false
		}
		switch i - start {
		case 0:
			return false
		case 1:
			if s[start] == '.' {
				return false
			}
		case 2:
			if s[start] == '.' && s[start+1] == '.' {
				return false
			}
		}
		p.ends[p.n] = uint16(i)
		p.n++
		start = i + 1
	}
	return ascii || printable(s)
}

// ValidPath reports whether s is a path Split accepts.
func ValidPath(s string) bool {
	var p Path
	return p.Split(s)
}

// printable: valid UTF-8 with no control, format (zero-width, bidi),
// separator, private-use, noncharacter or default-ignorable code point.
func printable(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || invisible(r) {
			return false
		}
		i += size
	}
	return true
}

func invisible(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs,
		unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector, unicode.Noncharacter_Code_Point) ||
		r == '\u00a0' || r == '\u115f' || r == '\u1160' || r == '\u3164' || r == '\uffa0' // fillers rendered as nothing
}

// Fold splits the folded form of the valid path src into p: NFKC, then
// Unicode case folding, then NFKC again. It returns false when the folded
// form is not itself a valid path (a compatibility character that folds to
// '/' or '.', say); callers treat that as refused. It allocates only when
// src is not already folded.
func (p *Path) Fold(src *Path) bool {
	f := FoldString(src.p)
	if f == src.p {
		*p = *src // already folded: the same cut
		return true
	}
	return p.Split(f)
}

// FoldString is the folded form of s (see Fold).
func FoldString(s string) string {
	ascii, upper := true, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
		if 'A' <= c && c <= 'Z' {
			upper = true
		}
	}
	switch {
	case ascii && !upper:
		return s
	case ascii:
		return strings.ToLower(s)
	}
	// A Caser keeps state, so one per call.
	return norm.NFKC.String(cases.Fold().String(norm.NFKC.String(s)))
}

// LinkInside reports whether a symlink at linkPath (a valid path) whose
// text is target stays inside the repository however a checkout resolves
// it: target is relative; its ".." components all come first, so no name
// after them can climb back through another link; it climbs no higher
// than linkPath's directory; the rest is a valid path (Split) with no
// .git component in any spelling a filesystem reads as one (any case, a
// trailing dot or space, the 8.3 name GIT~1).
func LinkInside(linkPath, target string) bool {
	var lp Path
	if !lp.Split(linkPath) || target == "" || len(target) > MaxPathLen || strings.HasSuffix(target, "/") {
		return false
	}
	up := 0
	rest := target
	for rest == ".." || strings.HasPrefix(rest, "../") {
		up++
		rest = strings.TrimPrefix(strings.TrimPrefix(rest, ".."), "/")
	}
	if up > lp.Len()-1 {
		return false // above the repository's root
	}
	if rest == "" {
		return up > 0 // a link to a directory above it, inside
	}
	var rp Path
	if !rp.Split(rest) {
		return false // absolute, unclean, "..", NUL, backslash, unprintable
	}
	for i := range rp.Len() {
		c := strings.ToLower(strings.TrimRight(rp.Seg(i), ". "))
		if c == ".git" || c == "git~1" {
			return false
		}
	}
	return true
}
