// Package pathglob is the one path-glob matcher of the project: the lease's
// allow and forbid rules (kernel/authority) and the git_commit target's
// path lists (broker) both match through it, so a path one side allows and
// the other refuses cannot exist.
//
// A glob is '/'-separated segments, each a path.Match pattern, plus "**"
// for any number (including zero) of whole segments. A path is relative,
// clean and bounded, and every one of its names is printable: control
// characters, invisible and default-ignorable code points (zero-width
// joiners, bidirectional controls, variation selectors) and invalid UTF-8
// are refused, because git and the filesystems a repository is checked out
// on do not agree on what such names mean.
//
// Invariants:
//   - Compile refuses a malformed glob ("secrets[/**", "a**b", "../x") with
//     an error; nothing ever treats a malformed glob as matching nothing.
//   - Match is allocation-free and bounded by O(segments of the glob ×
//     segments of the path), with no recursion.
//   - Folded matching (Fold, CompileFolded) compares the NFKC form under
//     Unicode case folding, so "SECRETS/x", "Secrets/x" and the fullwidth
//     "ｓｅｃｒｅｔｓ/x" all meet a folded "secrets/**": forbid rules use it,
//     since the repository may be checked out on a case-insensitive,
//     normalising filesystem (macOS, Windows). Folding allocates only for a
//     path that is not already in folded form.
//
// This package imports nothing of ours and is safe for concurrent use.
package pathglob
