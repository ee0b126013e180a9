package rootfs

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// SpecVersion is the only spec format this package reads.
const SpecVersion = 1

// maxSpecSize bounds LoadSpec; a spec is a short hand-written list.
const maxSpecSize = 1 << 20

// Spec declares what a rootfs contains. See README.md for the format.
type Spec struct {
	Version     int    `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// LibraryDirs replaces the default ELF search path (the Debian multiarch
	// directories) when non-empty.
	LibraryDirs []string    `json:"library_dirs,omitempty"`
	Executables []Entry     `json:"executables,omitempty"`
	Files       []Entry     `json:"files,omitempty"`
	Directories []DirEntry  `json:"directories,omitempty"`
	Symlinks    []SymlinkTo `json:"symlinks,omitempty"`
	// NPM installs pinned npm packages at build time and copies chosen
	// files out of them (see npm.go).
	NPM *NPM `json:"npm,omitempty"`
	// OCI or Debian (at most one) is the environment the rootfs is built
	// on: the image's or the bootstrap's tree, with the spec's symlinks,
	// npm files and --add files layered on top. A spec with an
	// environment copies nothing else from the host (no executables,
	// files, directories or library_dirs): the environment brings its
	// own libraries, and host ones would mix two distributions.
	OCI    *OCI    `json:"oci,omitempty"`
	Debian *Debian `json:"debian,omitempty"`
}

// Entry names one host path. Optional entries that are absent on the host
// are skipped with a note; a denied path is refused even when optional.
type Entry struct {
	Path     string `json:"path"`
	Optional bool   `json:"optional,omitempty"`
}

// DirEntry names a host directory copied recursively. Exclude patterns
// without a slash match any base name below the directory (e.g.
// "testdata"); patterns starting with "/" are anchored at the directory
// (e.g. "/test"). Both use path.Match syntax.
type DirEntry struct {
	Path     string   `json:"path"`
	Optional bool     `json:"optional,omitempty"`
	Exclude  []string `json:"exclude,omitempty"`
}

// SymlinkTo creates a symlink in the rootfs that need not exist on the host.
type SymlinkTo struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// LoadSpec reads and strictly decodes a spec file.
func LoadSpec(file string) (*Spec, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if len(data) > maxSpecSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrSpec, file, maxSpecSize)
	}
	s, err := DecodeSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// DecodeSpec strictly decodes and validates a spec document.
func DecodeSpec(data []byte) (*Spec, error) {
	if len(data) > maxSpecSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrSpec, maxSpecSize)
	}
	var s Spec
	if err := strictDecode(data, &s, 8); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks a spec built in Go the same way DecodeSpec checks a file.
func (s *Spec) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrSpec, fmt.Sprintf(format, a...))
	}
	if s.Version != SpecVersion {
		return bad("version %d not supported (this builder reads version %d)", s.Version, SpecVersion)
	}
	if s.Name == "" {
		return bad("name is required")
	}
	for _, d := range s.LibraryDirs {
		if err := checkAbs(d); err != nil {
			return bad("library_dirs: %v", err)
		}
	}
	for i, e := range s.Executables {
		if err := checkAbs(e.Path); err != nil {
			return bad("executables[%d]: %v", i, err)
		}
	}
	for i, e := range s.Files {
		if err := checkAbs(e.Path); err != nil {
			return bad("files[%d]: %v", i, err)
		}
	}
	for i, e := range s.Directories {
		if err := checkAbs(e.Path); err != nil {
			return bad("directories[%d]: %v", i, err)
		}
		if e.Path == "/" {
			return bad("directories[%d]: the host root cannot be copied", i)
		}
		for _, p := range e.Exclude {
			if p == "" || p == "/" {
				return bad("directories[%d]: empty exclude pattern", i)
			}
			if _, err := path.Match(strings.TrimPrefix(p, "/"), ""); err != nil {
				return bad("directories[%d]: exclude %q: %v", i, p, err)
			}
		}
	}
	for i, l := range s.Symlinks {
		if err := checkAbs(l.Path); err != nil {
			return bad("symlinks[%d]: %v", i, err)
		}
		if l.Path == "/" {
			return bad("symlinks[%d]: the root cannot be a symlink", i)
		}
		if l.Target == "" || strings.ContainsRune(l.Target, 0) {
			return bad("symlinks[%d]: empty or invalid target", i)
		}
	}
	if s.NPM != nil {
		if err := s.NPM.validate(); err != nil {
			return bad("npm: %v", err)
		}
	}
	if s.OCI != nil || s.Debian != nil {
		switch {
		case s.OCI != nil && s.Debian != nil:
			return bad("oci and debian: a rootfs has one environment")
		case len(s.Executables)+len(s.Files)+len(s.Directories)+len(s.LibraryDirs) > 0:
			return bad("a spec with an environment copies nothing from the host: no executables, files, directories or library_dirs")
		}
	}
	if s.OCI != nil {
		if err := s.OCI.validate(); err != nil {
			return bad("oci: %v", err)
		}
	}
	if s.Debian != nil {
		if err := s.Debian.validate(); err != nil {
			return bad("debian: %v", err)
		}
	}
	return nil
}

// checkAbs requires an absolute, clean path: "/usr/../etc/shadow" is refused
// rather than normalised so the spec says literally what it includes.
func checkAbs(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if !path.IsAbs(p) {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q is not clean", p)
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("path contains NUL")
	}
	return nil
}
