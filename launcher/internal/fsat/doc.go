// Package fsat resolves and changes files relative to directories already
// held (openat2 beneath, no symlink, magic link or ".."), writes records
// whole and fsync'd, and removes trees with two descriptors at any depth.
//
// Privilege: none of its own; it acts with its caller's credentials on the
// descriptors it is given.
package fsat
