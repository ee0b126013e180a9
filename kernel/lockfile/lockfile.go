package lockfile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"

	"golang.org/x/mod/module"
)

// Bounds of what Read takes from a commit.
const (
	MaxFiles     = 64
	MaxFileBytes = 32 << 20
	MaxEntries   = 200000
)

// NPM is one tarball a package-lock names.
type NPM struct {
	Name, Version string
	// Integrity is the lock's SRI string ("sha512-<base64>"), the
	// strongest hash when it lists several.
	Integrity string
}

// Set is what a commit's lockfiles pin.
type Set struct {
	// Files are the lockfiles read, by repository path.
	Files []string
	npm   map[string]NPM // tarball path on the registry → pin
	// npmNames are the package names npm holds pins for.
	npmNames map[string]bool
	goZip    map[string]string // module@version → h1 of the module zip
	goMod    map[string]string // module@version → h1 of its go.mod
	n        int
}

// Empty reports whether the set pins nothing.
func (s *Set) Empty() bool { return s == nil || len(s.npm)+len(s.goZip)+len(s.goMod) == 0 }

// NPMTarball is the pin for the tarball at path on an npm registry, if
// the lock names it.
func (s *Set) NPMTarball(path string) (NPM, bool) {
	if s == nil {
		return NPM{}, false
	}
	n, ok := s.npm[path]
	return n, ok
}

// NPMPackage reports whether the lock names any version of the package
// (its metadata, which npm reads to find a tarball the lock names
// without a URL, is then admitted; the tarballs stay pinned).
func (s *Set) NPMPackage(name string) bool {
	if s == nil {
		return false
	}
	return s.npmNames[name]
}

// GoZip is the h1 hash go.sum records for module@version's zip.
func (s *Set) GoZip(mod, version string) (string, bool) {
	if s == nil {
		return "", false
	}
	h, ok := s.goZip[mod+"@"+version]
	return h, ok
}

// GoMod is the h1 hash go.sum records for module@version's go.mod.
func (s *Set) GoMod(mod, version string) (string, bool) {
	if s == nil {
		return "", false
	}
	h, ok := s.goMod[mod+"@"+version]
	return h, ok
}

// Names says which lockfile kinds the set holds, for a refusal's reason.
func (s *Set) Names() string {
	if s == nil || len(s.Files) == 0 {
		return "no lockfile"
	}
	return strings.Join(s.Files, ", ")
}

func newSet() *Set {
	return &Set{npm: map[string]NPM{}, npmNames: map[string]bool{}, goZip: map[string]string{}, goMod: map[string]string{}}
}

// kind is the lockfile a repository path is, or "".
func kind(p string) string {
	for _, seg := range strings.Split(p, "/") {
		if seg == "node_modules" || seg == "vendor" || seg == "testdata" {
			return "" // a dependency's or a fixture's, not the project's
		}
	}
	switch path.Base(p) {
	case "go.sum":
		return "go.sum"
	case "package-lock.json", "npm-shrinkwrap.json":
		return "npm"
	}
	return ""
}

// Parse reads one lockfile's content (name is its repository path) into
// a new Set; ParseInto adds to an existing one.
func Parse(name string, data []byte) (*Set, error) {
	s := newSet()
	return s, s.parseInto(name, data)
}

func (s *Set) parseInto(name string, data []byte) error {
	var err error
	switch kind(name) {
	case "go.sum":
		err = s.goSum(data)
	case "npm":
		err = s.npmLock(data)
	default:
		return fmt.Errorf("lockfile: %s is not a lockfile this reads", name)
	}
	if err != nil {
		return fmt.Errorf("lockfile: %s: %w", name, err)
	}
	s.Files = append(s.Files, name)
	return nil
}

func (s *Set) count() error {
	if s.n++; s.n > MaxEntries {
		return fmt.Errorf("more than %d entries", MaxEntries)
	}
	return nil
}

// goSum reads "module version h1:hash" and "module version/go.mod
// h1:hash" lines; anything else is an error.
func (s *Set) goSum(data []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 4096)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || !strings.HasPrefix(f[2], "h1:") || !validH1(f[2]) {
			return fmt.Errorf("line %d is not \"module version h1:hash\"", line)
		}
		mod, ver := f[0], f[1]
		isMod := strings.HasSuffix(ver, "/go.mod")
		ver = strings.TrimSuffix(ver, "/go.mod")
		if err := module.Check(mod, ver); err != nil {
			return fmt.Errorf("line %d: %v", line, err)
		}
		if err := s.count(); err != nil {
			return err
		}
		if isMod {
			s.goMod[mod+"@"+ver] = f[2]
		} else {
			s.goZip[mod+"@"+ver] = f[2]
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %v", line+1, err)
	}
	return nil
}

func validH1(h string) bool {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "h1:"))
	return err == nil && len(b) == 32
}

// npmLock reads lockfileVersion 2 and 3 ("packages"); version 1
// ("dependencies" only) is refused: it is npm 6's, and npm ci rewrites it.
func (s *Set) npmLock(data []byte) error {
	var lock struct {
		Version  int `json:"lockfileVersion"`
		Packages map[string]struct {
			Version   string `json:"version"`
			Resolved  string `json:"resolved"`
			Integrity string `json:"integrity"`
			Link      bool   `json:"link"`
			Name      string `json:"name"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return err
	}
	if lock.Version < 2 || lock.Version > 3 {
		return fmt.Errorf("lockfileVersion %d: want 2 or 3 (npm 7 or later)", lock.Version)
	}
	for key, p := range lock.Packages {
		i := strings.LastIndex(key, "node_modules/")
		if i < 0 || p.Link {
			continue // the project itself, a workspace member, a link
		}
		name := p.Name
		if name == "" {
			name = key[i+len("node_modules/"):]
		}
		if !validNPMName(name) || p.Version == "" || strings.ContainsAny(p.Version, "/%?#") {
			return fmt.Errorf("%s: not a package name and version", key)
		}
		if p.Integrity == "" {
			continue // bundled inside its parent's tarball: never fetched
		}
		if !strings.HasPrefix(p.Integrity, "sha512-") && !strings.HasPrefix(p.Integrity, "sha1-") {
			return fmt.Errorf("%s: integrity %q is not sha512 or sha1", key, p.Integrity)
		}
		// The registry's tarball path: the lock's resolved URL, or (npm
		// omits it with omit-lockfile-registry-resolved) the registry's
		// own layout. The host is the allow list's business.
		tarball := "/" + name + "/-/" + name[strings.LastIndex(name, "/")+1:] + "-" + p.Version + ".tgz"
		if p.Resolved != "" {
			u, err := url.Parse(p.Resolved)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.User != nil {
				return fmt.Errorf("%s: resolved %q is not a registry URL (git and file dependencies are not lockfile-bound)", key, p.Resolved)
			}
			tarball = u.EscapedPath()
		}
		if err := s.count(); err != nil {
			return err
		}
		s.npm[tarball] = NPM{Name: name, Version: p.Version, Integrity: strongest(p.Integrity)}
		s.npmNames[name] = true
	}
	return nil
}

// validNPMName: a package name as the registry spells it, lower case,
// optionally scoped ("@scope/name"), no path tricks.
func validNPMName(n string) bool {
	if n == "" || len(n) > 214 || strings.Contains(n, "..") {
		return false
	}
	parts := strings.Split(n, "/")
	if len(parts) == 2 && !strings.HasPrefix(parts[0], "@") || len(parts) > 2 {
		return false
	}
	for _, c := range n {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.ContainsRune("-._~@/", c)) {
			return false
		}
	}
	return !strings.HasPrefix(parts[len(parts)-1], ".") && parts[len(parts)-1] != ""
}

// strongest is the sha512 hash of an SRI list, else its first.
func strongest(sri string) string {
	f := strings.Fields(sri)
	for _, h := range f {
		if strings.HasPrefix(h, "sha512-") {
			return h
		}
	}
	return f[0]
}

// Read is the Set of every lockfile in commit's tree of the repository at
// gitDir (bare or not) (outside node_modules, vendor and testdata). A commit without
// lockfiles gives an empty Set.
func Read(ctx context.Context, gitDir, commit string) (*Set, error) {
	if !isOID(commit) {
		return nil, fmt.Errorf("lockfile: %q is not a commit id", commit)
	}
	out, err := git(ctx, gitDir, "ls-tree", "-r", "-z", "--full-tree", commit)
	if err != nil {
		return nil, err
	}
	s := newSet()
	var files int
	for _, ent := range bytes.Split(out, []byte{0}) {
		meta, p, ok := strings.Cut(string(ent), "\t")
		if !ok || kind(p) == "" {
			continue
		}
		f := strings.Fields(meta) // mode type oid
		if len(f) != 3 || f[1] != "blob" {
			continue
		}
		if files++; files > MaxFiles {
			return nil, fmt.Errorf("lockfile: more than %d lockfiles in %s", MaxFiles, commit)
		}
		size, err := git(ctx, gitDir, "cat-file", "-s", f[2])
		if err != nil {
			return nil, err
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(size)), 10, 64); err != nil || n > MaxFileBytes {
			return nil, fmt.Errorf("lockfile: %s is over %d bytes", p, MaxFileBytes)
		}
		data, err := git(ctx, gitDir, "cat-file", "blob", f[2])
		if err != nil {
			return nil, err
		}
		if len(data) > MaxFileBytes {
			return nil, fmt.Errorf("lockfile: %s is over %d bytes", p, MaxFileBytes)
		}
		if err := s.parseInto(p, data); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func isOID(oid string) bool {
	if len(oid) != 40 && len(oid) != 64 {
		return false
	}
	return strings.Trim(oid, "0123456789abcdef") == ""
}

// git runs plumbing on the trusted repository with no configuration but
// its own (no hooks or filters run for cat-file and ls-tree).
func git(ctx context.Context, gitDir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", gitDir}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("lockfile: git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
