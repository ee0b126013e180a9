package broker

import (
	"path"
	"strings"
)

// matchGlob matches a slash-separated path against a pattern whose
// segments are path.Match patterns, plus "**" for any number (including
// zero) of whole segments. A malformed pattern matches nothing.
func matchGlob(pattern, name string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		ok, err := path.Match(pat[0], name[0])
		if err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// pathAllowed: allowed by some allow glob and by no forbid glob.
func pathAllowed(p string, allow, forbid []string) bool {
	for _, f := range forbid {
		if matchGlob(f, p) {
			return false
		}
	}
	for _, a := range allow {
		if matchGlob(a, p) {
			return true
		}
	}
	return false
}
