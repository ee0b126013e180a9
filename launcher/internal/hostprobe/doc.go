// Package hostprobe reports what the host's kernel offers the launcher
// (preflight's namespaces, release, seccomp actions and feature list).
//
// Privilege: none; it reads /proc and tries harmless calls.
package hostprobe
