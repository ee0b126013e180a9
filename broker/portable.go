package broker

import (
	"strings"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// A tree that checks out on the host may break everyone else's checkout:
// on a case-insensitive or normalising file system (macOS, Windows) two
// paths equal after case folding and NFC are one file, and Windows refuses
// some names outright. A commit whose change brings either is refused
// (issue 23 §3); a target may admit the Windows names (AllowNonPortable),
// never the collisions.

var folder = cases.Fold()

// foldKey is the name a case-insensitive, normalising file system sees.
func foldKey(p string) string { return folder.String(norm.NFC.String(p)) }

// collision is a path of tree (every path and every directory of the
// resulting tree) that folds to the same name as a path changed, or "".
type collisions map[string][]string

// newCollisions indexes the resulting tree's paths and their directories
// by folded name.
func newCollisions(paths []string) collisions {
	c := collisions{}
	seen := map[string]bool{}
	for _, p := range paths {
		for {
			if seen[p] {
				break
			}
			seen[p] = true
			k := foldKey(p)
			c[k] = append(c[k], p)
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	return c
}

// clash is another spelling of changed path p (or of one of its
// directories) in the tree, or "".
func (c collisions) clash(p string) (string, string) {
	for {
		for _, q := range c[foldKey(p)] {
			if q != p {
				return p, q
			}
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return "", ""
		}
		p = p[:i]
	}
}

// windowsReserved are device names Windows refuses as a path element,
// with or without an extension.
var windowsReserved = map[string]bool{"con": true, "prn": true, "aux": true, "nul": true, "conin$": true, "conout$": true}

func init() {
	for _, d := range "123456789¹²³" {
		windowsReserved["com"+string(d)] = true
		windowsReserved["lpt"+string(d)] = true
	}
}

// portableName reports whether every element of p is a name Windows can
// check out: none of <>:"|?* or a control byte, no trailing dot or space,
// no device name.
func portableName(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == "" || strings.HasSuffix(e, ".") || strings.HasSuffix(e, " ") || strings.ContainsAny(e, `<>:"|?*\`) {
			return false
		}
		for i := 0; i < len(e); i++ {
			if e[i] < 0x20 {
				return false
			}
		}
		stem, _, _ := strings.Cut(e, ".")
		if windowsReserved[strings.ToLower(strings.TrimRight(stem, " "))] {
			return false
		}
	}
	return true
}
