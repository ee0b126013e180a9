package broker

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MessageRune reports whether r may stand in a commit message the kernel
// writes: printable text, newline and tab. Refused are the other C0
// controls (escape sequences that retitle a terminal or redraw a line),
// carriage return (which draws a later line over the subject in `git
// log`), C1 controls, and format characters (Unicode Cf: bidi overrides,
// zero-width joiners and spaces, the BOM), which make a message read
// otherwise than it is. The harvest sanitises the task with the same rule
// (kernel/episode), so the kernel never writes what it would refuse.
func MessageRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return true
	case r == utf8.RuneError, r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f, unicode.Is(unicode.Cf, r):
		return false
	}
	return unicode.IsPrint(r) || unicode.IsSpace(r)
}

// identityTrailers are trailers that vouch for a person. A message the
// kernel writes for an effect cannot vouch for anyone, so a line carrying
// one (any case) is refused rather than committed as a forgery.
var identityTrailers = []string{"signed-off-by", "co-authored-by", "reviewed-by", "acked-by", "tested-by", "reported-by", "approved-by"}

// IdentityTrailer reports whether a message line is such a trailer.
func IdentityTrailer(line string) bool {
	k, _, ok := strings.Cut(strings.TrimSpace(line), ":")
	if !ok {
		return false
	}
	k = strings.ToLower(strings.TrimSpace(k))
	for _, t := range identityTrailers {
		if k == t {
			return true
		}
	}
	return false
}

// messageRefusal says why m may not be a commit message, or "".
func messageRefusal(m string) string {
	switch {
	case m == "" || len(m) > 4096:
		return "empty or longer than 4096 bytes"
	case !utf8.ValidString(m):
		return "not UTF-8"
	case strings.Contains(m, TrailerKey+":"):
		// A worker-written trailer could make reconciliation find a
		// commit that is not this effect's.
		return "carries the kernel's own trailer"
	}
	for _, r := range m {
		if !MessageRune(r) {
			return "holds a control or format character"
		}
	}
	for _, line := range strings.Split(m, "\n") {
		if IdentityTrailer(line) {
			return "carries an identity trailer"
		}
	}
	return ""
}
