package protocol

// The protocol's identifiers are short runs of a few byte classes. Each is
// checked by hand against the pattern README.md states, rather than by a
// regular expression: every launcher process links this package, and
// regexp's code and compiled programs cost the monitor about 0.3 MiB of
// its resident set. TestPatternsMatchTheirExpressions holds each check
// equal to its pattern compiled by regexp.
type pattern struct {
	expr  string // as README.md states it
	match func(string) bool
}

// MatchString reports whether s matches the whole pattern.
func (p pattern) MatchString(s string) bool { return p.match(s) }

func (p pattern) String() string { return p.expr }

var (
	idPattern = pattern{`^[a-z0-9][a-z0-9-]{0,62}$`,
		func(s string) bool { return word(s, 63, lower|digit, lower|digit|dash) }}
	requestIDPattern = pattern{`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`,
		func(s string) bool { return word(s, 64, alnum, alnum|dash) }}
	envKeyPattern = pattern{`^[A-Za-z_][A-Za-z0-9_]{0,127}$`,
		func(s string) bool { return word(s, 128, alpha|underscore, alnum|underscore) }}
	digestPattern = pattern{`^[0-9a-f]{64}$`, func(s string) bool { return len(s) == 64 && all(s, lowerHex) }}
	sha256Digest  = pattern{`^sha256:[0-9a-f]{64}$`,
		func(s string) bool { return len(s) == 71 && s[:7] == "sha256:" && all(s[7:], lowerHex) }}
	uuidPattern = pattern{`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, canonicalUUID}
	kindPattern = pattern{`^[a-z][a-z0-9_]{0,31}$`,
		func(s string) bool { return word(s, 32, lower, lower|digit|underscore) }}
	targetIDPattern = pattern{`^[a-z0-9][a-z0-9_-]{0,62}$`,
		func(s string) bool { return word(s, 63, lower|digit, lower|digit|underscore|dash) }}
	keyIDPattern = pattern{`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`,
		func(s string) bool { return word(s, 64, alnum, alnum|dot|underscore|dash) }}
	integerLiteral = pattern{`^-?(0|[1-9][0-9]*)$`, integer}
)

// byteClass is a set of the ASCII byte kinds identifiers are made of.
type byteClass uint8

const (
	lower byteClass = 1 << iota
	upper
	digit
	dash
	underscore
	dot
	hexLetter // a-f

	alpha = lower | upper
	alnum = alpha | digit
	// lowerHex is hex as the protocol spells it: digits and a-f only.
	lowerHex = digit | hexLetter
)

func (c byteClass) has(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z':
		return c&lower != 0 || c&hexLetter != 0 && b <= 'f'
	case b >= 'A' && b <= 'Z':
		return c&upper != 0
	case b >= '0' && b <= '9':
		return c&digit != 0
	case b == '-':
		return c&dash != 0
	case b == '_':
		return c&underscore != 0
	case b == '.':
		return c&dot != 0
	}
	return false
}

// word: 1..max bytes, the first in first, the others in rest.
func word(s string, max int, first, rest byteClass) bool {
	return len(s) >= 1 && len(s) <= max && first.has(s[0]) && all(s[1:], rest)
}

func all(s string, c byteClass) bool {
	for i := 0; i < len(s); i++ {
		if !c.has(s[i]) {
			return false
		}
	}
	return true
}

// canonicalUUID: 8-4-4-4-12 lower-case hex digits.
func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
		} else if !lowerHex.has(s[i]) {
			return false
		}
	}
	return true
}

// integer: an optional minus, then 0 or digits without a leading zero.
func integer(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	return s == "0" || len(s) > 0 && s[0] != '0' && all(s, digit)
}
