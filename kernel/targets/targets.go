package targets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/autonomic-kernel/autonomic/internal/statefile"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/workspace"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// FileName is the registrations' file under state_dir, and ReposDirName
// the directory of the kernel's own copies of repositories it was given.
const (
	FileName     = "targets.json"
	ReposDirName = "repos"
)

// Registry holds the git_commit targets. Added ones reach the components
// that use targets through the hooks given to Open, in order, before Add
// returns.
type Registry struct {
	mu     sync.RWMutex
	file   string
	repos  string // state_dir/repos: the kernel's copies of repositories it does not own
	all    map[string]config.GitCommitTarget
	added  map[string]config.GitCommitTarget
	hooks  []func(id string, t config.GitCommitTarget) error
	git    string
	kernel int // the kernel's uid: the owner a repository must have
}

// file is the persisted form.
type file struct {
	GitCommit map[string]config.GitCommitTarget `json:"git_commit"`
}

// Load reads the registrations persisted under stateDir (none: an empty
// set), validated; a configured id among them is an error (the
// configuration is edited by hand: say so, rather than pick one).
func Load(stateDir string, configured map[string]config.GitCommitTarget) (map[string]config.GitCommitTarget, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]config.GitCommitTarget{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f file
	if err := protocol.DecodeStrict(b, &f); err != nil {
		return nil, fmt.Errorf("targets: %s: %w", FileName, err)
	}
	for id, t := range f.GitCommit {
		if _, ok := configured[id]; ok {
			return nil, fmt.Errorf("targets: %s registers %q, which the configuration also names; remove one", FileName, id)
		}
		if err := config.CheckGitCommitTarget(id, t); err != nil {
			return nil, fmt.Errorf("targets: %s: %w", FileName, err)
		}
	}
	if f.GitCommit == nil {
		f.GitCommit = map[string]config.GitCommitTarget{}
	}
	return f.GitCommit, nil
}

// Open is the registry of configured plus added (Load's) targets.
func Open(stateDir string, configured, added map[string]config.GitCommitTarget, git string,
	hooks ...func(id string, t config.GitCommitTarget) error) *Registry {
	all := maps.Clone(configured)
	if all == nil {
		all = map[string]config.GitCommitTarget{}
	}
	maps.Copy(all, added)
	own := maps.Clone(added)
	if own == nil {
		own = map[string]config.GitCommitTarget{}
	}
	return &Registry{file: filepath.Join(stateDir, FileName), repos: filepath.Join(stateDir, ReposDirName), all: all, added: own,
		hooks: hooks, git: git, kernel: os.Getuid()}
}

// Get is one target.
func (r *Registry) Get(id string) (config.GitCommitTarget, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.all[id]
	return t, ok
}

// Entry is one target as the API lists it.
type Entry struct {
	ID     string                 `json:"id"`
	Target config.GitCommitTarget `json:"target"`
	// Added: registered at run time (autonomic repo add), not configured.
	Added bool `json:"added"`
}

// List is every target, by id.
func (r *Registry) List() []Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Entry, 0, len(r.all))
	for _, id := range sortedIDs(r.all) {
		_, added := r.added[id]
		out = append(out, Entry{ID: id, Target: r.all[id], Added: added})
	}
	return out
}

// Request is `autonomic repo add`.
type Request struct {
	Repo string `json:"repo"`
	// ID defaults to the repository's directory name.
	ID string `json:"id,omitempty"`
	// Test is the verification command; empty: detected (Detect).
	Test []string `json:"test,omitempty"`
	// Setup and Environment are the target's setup command and rootfs
	// (config.GitCommitTarget's setup and environment); empty: none, and
	// the agent profile's rootfs.
	Setup       []string `json:"setup,omitempty"`
	Environment string   `json:"environment,omitempty"`
}

// Added is what Add registered, and how it chose the test command.
type Added struct {
	Entry
	// TestChosen says where the test command came from.
	TestChosen string `json:"test_chosen"`
	// ClonedFrom: the repository was not the kernel's, which took a bare
	// copy (Target.Repo) of it; agents land there.
	ClonedFrom string `json:"cloned_from,omitempty"`
}

// Add registers a repository as a git_commit target: its agents land on
// new branches under refs/heads/agent/, any path, class 3, verified by its
// tests. Refused (with what to do) when the repository is not a git
// repository the kernel's account owns, the id is taken, or no test
// command is given or found.
func (r *Registry) Add(ctx context.Context, req Request) (Added, error) {
	src, owned, err := r.gitDir(req.Repo)
	if err != nil {
		return Added{}, err
	}
	id := req.ID
	if id == "" {
		id = defaultID(src)
	}
	gitDir, cloned := src, ""
	if !owned {
		// Not the kernel's: it takes a bare copy of its own under
		// state_dir/repos, where its agents land; the operator fetches
		// their branches from it.
		if !config.ValidTargetID(id) {
			return Added{}, protocol.Errorf(protocol.CodeInvalidField, "target id %q", id)
		}
		gitDir = filepath.Join(r.repos, id+".git")
		if _, err := os.Lstat(gitDir); err == nil {
			return Added{}, protocol.Errorf(protocol.CodeInvalidField, "%s exists; name another id with --id", gitDir)
		}
		if err := os.MkdirAll(r.repos, 0o750); err != nil {
			return Added{}, err
		}
		if err := workspace.CloneBare(ctx, r.git, src, gitDir); err != nil {
			return Added{}, protocol.Errorf(protocol.CodeNotFound, "the kernel's account could not clone %s (can it read it?): %v", src, err)
		}
		cloned = src
	}
	argv, chosen := req.Test, "given with --test"
	if len(argv) == 0 {
		if argv, chosen, err = Detect(ctx, r.git, gitDir); err != nil {
			return Added{}, err
		}
	}
	t := config.GitCommitTarget{Repo: gitDir, AllowedRefPrefixes: []string{"refs/heads/agent/"}, AllowedPaths: []string{"**"},
		ForbiddenPaths: []string{}, VerifyArgv: argv, Class: 3, Setup: req.Setup, Environment: req.Environment}
	if err := config.CheckGitCommitTarget(id, t); err != nil {
		return Added{}, protocol.Errorf(protocol.CodeInvalidField, "%w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.all[id]; ok {
		return Added{}, protocol.Errorf(protocol.CodeInvalidField, "a target %q exists; name another with --id", id)
	}
	for oid, o := range r.all {
		if o.Repo == gitDir {
			return Added{}, protocol.Errorf(protocol.CodeInvalidField, "the repository is already target %q", oid)
		}
	}
	next := maps.Clone(r.added)
	next[id] = t
	if err := r.save(next); err != nil {
		return Added{}, err
	}
	ok := false
	defer func() {
		if !ok && cloned != "" {
			os.RemoveAll(gitDir)
		}
	}()
	for _, h := range r.hooks {
		if err := h(id, t); err != nil {
			return Added{}, err
		}
	}
	r.added, r.all[id] = next, t
	ok = true
	return Added{Entry: Entry{ID: id, Target: t, Added: true}, TestChosen: chosen, ClonedFrom: cloned}, nil
}

// gitDir resolves repo to its git dir, and says whether the kernel's
// account owns it (git refuses a repository another account owns, and the
// kernel must write its refs).
func (r *Registry) gitDir(repo string) (dir string, owned bool, err error) {
	if !filepath.IsAbs(repo) || filepath.Clean(repo) != repo {
		return "", false, protocol.Errorf(protocol.CodeInvalidField, "repo must be an absolute, clean path")
	}
	real, err := filepath.EvalSymlinks(repo)
	if err != nil {
		return "", false, protocol.Errorf(protocol.CodeNotFound, "the kernel's account cannot reach %s (it needs to read it: check the directories above it)", repo)
	}
	dir = real
	if fi, err := os.Stat(filepath.Join(real, ".git")); err == nil && fi.IsDir() {
		dir = filepath.Join(real, ".git") // a work tree: its git dir
	}
	for _, f := range []string{"HEAD", "objects", "refs"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", false, protocol.Errorf(protocol.CodeInvalidField, "%s is not a git repository the kernel's account can read (no %s)", real, f)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", false, protocol.Errorf(protocol.CodeNotFound, "%v", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return dir, ok && int(st.Uid) == r.kernel, nil
}

var idUnsafe = regexp.MustCompile(`[^a-z0-9_.-]+`)

// defaultID is the repository's directory name, lower-cased, without
// .git, as a target id.
func defaultID(gitDir string) string {
	name := filepath.Base(gitDir)
	if name == ".git" {
		name = filepath.Base(filepath.Dir(gitDir))
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".git")
	name = strings.Trim(idUnsafe.ReplaceAllString(name, "-"), "-._")
	if name == "" {
		name = "repo"
	}
	return name[:min(len(name), 64)]
}

// save writes the registrations whole.
func (r *Registry) save(added map[string]config.GitCommitTarget) error {
	return statefile.WriteJSON(r.file, file{GitCommit: added})
}

func sortedIDs(m map[string]config.GitCommitTarget) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Detect chooses a repository's test command from what its HEAD holds, in
// this order: a Makefile's test target (make test), package.json's test
// script (npm test), go.mod (go test ./...), Cargo.toml (cargo test), a
// pytest configuration or conftest.py (python3 -m pytest). chosen says why.
func Detect(ctx context.Context, git, gitDir string) (argv []string, chosen string, err error) {
	files := []string{"GNUmakefile", "makefile", "Makefile", "package.json", "go.mod", "Cargo.toml", "pytest.ini", "conftest.py",
		"pyproject.toml", "setup.cfg", "tox.ini"}
	got, err := workspace.ReadAt(ctx, git, gitDir, "HEAD", files, 1<<20)
	if err != nil {
		return nil, "", protocol.Errorf(protocol.CodeInvalidField, "reading the repository's HEAD: %v", err)
	}
	for _, mk := range []string{"GNUmakefile", "makefile", "Makefile"} {
		if b, ok := got[mk]; ok && makeTarget.Match(b) {
			return []string{"make", "test"}, mk + " has a test target", nil
		}
	}
	if b, ok := got["package.json"]; ok {
		var pkg struct {
			Scripts map[string]string `json:"scripts"`
		}
		if json.Unmarshal(b, &pkg) == nil && pkg.Scripts["test"] != "" && !strings.Contains(pkg.Scripts["test"], "no test specified") {
			return []string{"npm", "test"}, "package.json has a test script", nil
		}
	}
	if _, ok := got["go.mod"]; ok {
		return []string{"go", "test", "./..."}, "go.mod: a Go module", nil
	}
	if _, ok := got["Cargo.toml"]; ok {
		return []string{"cargo", "test"}, "Cargo.toml: a Rust crate", nil
	}
	for f, mark := range map[string]string{"pytest.ini": "", "conftest.py": "", "pyproject.toml": "[tool.pytest", "setup.cfg": "[tool:pytest]", "tox.ini": "[pytest]"} {
		if b, ok := got[f]; ok && bytes.Contains(b, []byte(mark)) {
			return []string{"python3", "-m", "pytest"}, f + ": pytest", nil
		}
	}
	return nil, "", protocol.Errorf(protocol.CodeInvalidField,
		"no test command found (no Makefile test target, npm test script, go.mod, Cargo.toml or pytest configuration at HEAD); name one with --test")
}

// makeTarget: a rule for "test" (alone or among others) at a line start.
var makeTarget = regexp.MustCompile(`(?m)^(?:[A-Za-z0-9_.-]+[ \t]+)*test(?:[ \t]+[A-Za-z0-9_.-]+)*[ \t]*::?(?:[^=]|$)`)
