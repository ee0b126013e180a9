package rootfs

import "errors"

// Sentinel errors; every error Build, LoadSpec and Verify return wraps one of
// them so callers can branch with errors.Is.
var (
	// ErrSpec: the spec (or an --add argument) is malformed.
	ErrSpec = errors.New("invalid rootfs spec")
	// ErrDenied: a path or file content matches the denylist.
	ErrDenied = errors.New("denied by rootfs denylist")
	// ErrMissing: a required (non-optional) host path does not exist.
	ErrMissing = errors.New("required host path missing")
	// ErrUnresolved: a DT_NEEDED library of a required executable was not found.
	ErrUnresolved = errors.New("unresolved ELF dependency")
	// ErrConflict: two sources disagree about one rootfs path, or a source
	// names a path the builder reserves.
	ErrConflict = errors.New("conflicting rootfs path")
	// ErrDest: the destination is not a fresh directory.
	ErrDest = errors.New("destination not usable")
	// ErrMismatch: a tree does not match its manifest.
	ErrMismatch = errors.New("rootfs does not match its manifest")
	// ErrManifest: manifest.json is missing, malformed or not canonical.
	ErrManifest = errors.New("invalid rootfs manifest")
	// ErrNPM: the spec's npm install failed or did not give the pinned
	// versions with their integrity.
	ErrNPM = errors.New("npm install failed")
	// ErrEvict: a cache eviction was refused (a bad cache path or launcher
	// configuration: then before anything was removed) or failed.
	ErrEvict = errors.New("rootfs cache eviction refused")
)
