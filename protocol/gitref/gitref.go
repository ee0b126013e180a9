package gitref

import "strings"

// Tail reports whether rest, the part of a ref name after an allowed
// prefix, is one the kernel lets an effect create (doc.go).
func Tail(rest string) bool {
	parts := strings.Split(rest, "/")
	if len(parts) > 4 || strings.Contains(rest, "..") {
		return false
	}
	for _, c := range parts {
		if !component(c) || strings.HasSuffix(c, ".lock") || strings.HasSuffix(c, ".") {
			return false
		}
	}
	return true
}

// component: 1–64 bytes of [A-Za-z0-9._-], the first not '.' or '-'.
func component(c string) bool {
	if len(c) == 0 || len(c) > 64 || c[0] == '.' || c[0] == '-' {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// Prefix reports whether p is a branch prefix an operator may allow:
// "refs/heads/", then a Tail, then '/'.
func Prefix(p string) bool {
	tail, ok := strings.CutPrefix(p, "refs/heads/")
	return ok && strings.HasSuffix(tail, "/") && Tail(strings.TrimSuffix(tail, "/"))
}

// Under reports whether ref is a creatable branch under one of prefixes.
func Under(ref string, prefixes []string) bool {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(ref, p); ok && Prefix(p) && Tail(rest) {
			return true
		}
	}
	return false
}
