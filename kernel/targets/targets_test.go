package targets

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/autonomic-kernel/autonomic/internal/testbed"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/protocol"
)

func repoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "Proj_One")
	os.MkdirAll(dir, 0o755)
	testbed.Git(t, dir, "init", "-q", "-b", "main")
	for f, body := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644)
	}
	testbed.Git(t, dir, "add", ".")
	testbed.Git(t, dir, "commit", "-q", "-m", "base")
	return dir
}

// TestDetectTestCommand: the test command is read from the repository's
// HEAD (what is committed, not what lies in the work tree), in a fixed
// order, and the choice says why; a repository with none says what to do.
func TestDetectTestCommand(t *testing.T) {
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"Makefile": "all:\n\tcc x.c\n\ntest: all\n\t./run\n"}, "make test"},
		{map[string]string{"GNUmakefile": "check test:\n\t./t\n", "package.json": `{"scripts":{"test":"jest"}}`}, "make test"},
		{map[string]string{"Makefile": "build:\n\tgo build\n", "package.json": `{"scripts":{"test":"jest"}}`}, "npm test"},
		{map[string]string{"package.json": `{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}`, "go.mod": "module x\n"}, "go test ./..."},
		{map[string]string{"Cargo.toml": "[package]\nname = \"x\"\n"}, "cargo test"},
		{map[string]string{"pyproject.toml": "[project]\nname='x'\n[tool.pytest.ini_options]\n"}, "python3 -m pytest"},
		{map[string]string{"tests/conftest.py": "", "conftest.py": "import pytest\n"}, "python3 -m pytest"},
		{map[string]string{"Makefile": "TEST = x\ntest-data:\n\ttrue\n"}, ""},
		{map[string]string{"README": "hi\n"}, ""},
	} {
		dir := repoWith(t, c.files)
		argv, why, err := Detect(context.Background(), "", filepath.Join(dir, ".git"))
		got := strings.Join(argv, " ")
		if got != c.want || (c.want == "" && (err == nil || !strings.Contains(err.Error(), "--test"))) || (c.want != "" && why == "") {
			t.Errorf("%v: %q (%s), %v; want %q", c.files, got, why, err, c.want)
		}
	}
	// The work tree's uncommitted Makefile is not what is tested.
	dir := repoWith(t, map[string]string{"README": "x\n"})
	os.WriteFile(filepath.Join(dir, "Makefile"), []byte("test:\n\ttrue\n"), 0o644)
	if argv, _, err := Detect(context.Background(), "", filepath.Join(dir, ".git")); err == nil {
		t.Errorf("an uncommitted Makefile chose %v", argv)
	}
}

// TestAddRefusesWhatItCannotServe: a path that is no repository, a taken
// id, the same repository twice: refused, nothing persisted, no hook run.
func TestAddRefusesWhatItCannotServe(t *testing.T) {
	state := t.TempDir()
	dir := repoWith(t, map[string]string{"Makefile": "test:\n\ttrue\n"})
	hooked := 0
	r := Open(state, map[string]config.GitCommitTarget{"taken": {Repo: "/srv/x.git"}}, nil, "",
		func(string, config.GitCommitTarget) error { hooked++; return nil })
	ctx := context.Background()
	if _, err := r.Add(ctx, Request{Repo: t.TempDir()}); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("not a repository: %v", err)
	}
	if _, err := r.Add(ctx, Request{Repo: "relative/path"}); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("relative: %v", err)
	}
	if _, err := r.Add(ctx, Request{Repo: dir, ID: "taken"}); err == nil {
		t.Error("a configured id was taken over")
	}
	if _, err := r.Add(ctx, Request{Repo: dir, Environment: "../dev"}); protocol.AsWire(err).Code != protocol.CodeInvalidField {
		t.Errorf("an environment that is no rootfs name: %v", err)
	}
	if hooked != 0 {
		t.Fatalf("a refused add ran %d hooks", hooked)
	}
	if _, err := os.Stat(filepath.Join(state, FileName)); !os.IsNotExist(err) {
		t.Fatal("a refused add persisted something")
	}
	got, err := r.Add(ctx, Request{Repo: dir, Setup: []string{"npm", "ci"}, Environment: "dev"})
	if err != nil || got.ID != "proj_one" || strings.Join(got.Target.VerifyArgv, " ") != "make test" || hooked != 1 ||
		strings.Join(got.Target.Setup, " ") != "npm ci" || got.Target.Environment != "dev" ||
		got.Target.Repo != filepath.Join(dir, ".git") || !slices.Equal(got.Target.AllowedRefPrefixes, []string{"refs/heads/agent/"}) {
		t.Fatalf("add: %+v, %v (hooks %d)", got, err, hooked)
	}
	if _, err := r.Add(ctx, Request{Repo: dir, ID: "again"}); err == nil {
		t.Error("the same repository registered twice")
	}
	// Read back at the next start, validated; a configured id among them
	// stops the start.
	added, err := Load(state, nil)
	if err != nil || added["proj_one"].Repo != got.Target.Repo {
		t.Fatalf("load: %+v, %v", added, err)
	}
	if fi, _ := os.Stat(filepath.Join(state, FileName)); fi.Mode().Perm() != 0o600 {
		t.Errorf("the file is %v", fi.Mode())
	}
	if _, err := Load(state, map[string]config.GitCommitTarget{"proj_one": {}}); err == nil {
		t.Error("a configured id among the registrations was accepted")
	}
	os.WriteFile(filepath.Join(state, FileName), []byte(`{"git_commit":{"x":{"repo":"rel"}}}`), 0o600)
	if _, err := Load(state, nil); err == nil {
		t.Error("an invalid registration was read")
	}
}

// TestAddClonesWhatTheKernelDoesNotOwn: a repository another account owns
// is not served in place (git would refuse it, and the kernel must write
// its refs): the kernel takes a bare copy of its own under
// state_dir/repos, with none of the source's hooks or configuration, and
// the copy is the target.
func TestAddClonesWhatTheKernelDoesNotOwn(t *testing.T) {
	state := t.TempDir()
	dir := repoWith(t, map[string]string{"Makefile": "test:\n\ttrue\n"})
	os.WriteFile(filepath.Join(dir, ".git", "hooks", "post-checkout"), []byte("#!/bin/sh\ntouch "+filepath.Join(state, "ran")+"\n"), 0o755)
	testbed.Git(t, dir, "config", "core.fsmonitor", "touch "+filepath.Join(state, "ran"))
	srcHead := testbed.Git(t, dir, "rev-parse", "HEAD")
	r := Open(state, nil, nil, "")
	if os.Geteuid() == 0 {
		// Another account's, for real: git itself refuses it unless told.
		if err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		}); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Dir(dir), 0o755)
	} else {
		r.kernel++ // as if the kernel ran as another account than the repository's owner
	}
	got, err := r.Add(context.Background(), Request{Repo: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(state, ReposDirName, "proj_one.git")
	if got.Target.Repo != want || got.ClonedFrom != filepath.Join(dir, ".git") {
		t.Fatalf("added %+v", got)
	}
	if head := testbed.Git(t, want, "rev-parse", "HEAD"); head != srcHead {
		t.Fatalf("the copy is at %s", head)
	}
	if cfg := testbed.Git(t, want, "config", "--local", "--list"); strings.Contains(cfg, "fsmonitor") {
		t.Fatalf("the source's configuration came along:\n%s", cfg)
	}
	if _, err := os.Stat(filepath.Join(want, "hooks", "post-checkout")); err == nil {
		t.Fatal("the source's hook came along")
	}
	if _, err := os.Stat(filepath.Join(state, "ran")); err == nil {
		t.Fatal("the source's code ran")
	}
}
