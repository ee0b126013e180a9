package broker

import "github.com/autonomic-kernel/autonomic/protocol/pathglob"

// The broker's path lists (git targets, HTTP paths) match through the one
// matcher, protocol/pathglob, like the lease's rules. Globs are checked
// when the configuration is loaded (kernel/config); one that does not
// compile here still matches nothing, and the forbid side then refuses.

// matchGlob matches a slash-separated path against a glob. A malformed
// pattern or an invalid path matches nothing; the empty path (an HTTP
// target's root) is matched by "**" alone, as it always was.
func matchGlob(pattern, name string) bool {
	if name == "" {
		return pattern == "**"
	}
	g, err := pathglob.Compile(pattern)
	return err == nil && g.MatchString(name)
}

// pathAllowed: a valid path, allowed by some allow glob and by no forbid
// glob. Forbids compare folded (case and Unicode compatibility variants of
// a forbidden name are forbidden too); a forbid that does not compile
// forbids everything, since a typo must not open a hole.
func pathAllowed(p string, allow, forbid []string) bool {
	var sp, folded pathglob.Path
	if !sp.Split(p) || !folded.Fold(&sp) {
		return false
	}
	for _, f := range forbid {
		g, err := pathglob.CompileFolded(f)
		if err != nil || g.Match(&folded) {
			return false
		}
	}
	for _, a := range allow {
		if g, err := pathglob.Compile(a); err == nil && g.Match(&sp) {
			return true
		}
	}
	return false
}
