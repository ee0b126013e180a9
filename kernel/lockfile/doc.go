// Package lockfile reads what a repository's lockfiles pin at one commit:
// go.sum's module versions with their h1 hashes, and package-lock.json's
// (or npm-shrinkwrap.json's) registry tarballs with their integrity. The
// egress proxy, in a policy's lockfile-bound mode, admits on a registry
// host only the objects a Set names and files a fill in the shared cache
// only when its bytes match the Set's digest.
//
// Invariant: a Set holds exactly what the lockfiles of the commit say,
// read strictly and within bounds (file count and size, entry count);
// a lockfile that does not parse makes Read fail, never a smaller Set,
// so a malformed lockfile cannot silently admit nothing or everything.
// Only the commit's objects are read (git cat-file on the trusted
// repository), never a worker's workspace.
package lockfile
