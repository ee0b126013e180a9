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

// TestAddRefusesWhatItCannotServe: a path that is no repository, one the
// kernel's account does not own (with the commands that fix it), a taken
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
	r.kernel = r.kernel + 1 // as if the kernel ran as another account
	_, err := r.Add(ctx, Request{Repo: dir})
	if protocol.AsWire(err).Code != protocol.CodeForbidden || !strings.Contains(err.Error(), "git clone --bare") || !strings.Contains(err.Error(), "chown") {
		t.Errorf("foreign owner: %v", err)
	}
	r.kernel--
	if hooked != 0 {
		t.Fatalf("a refused add ran %d hooks", hooked)
	}
	if _, err := os.Stat(filepath.Join(state, FileName)); !os.IsNotExist(err) {
		t.Fatal("a refused add persisted something")
	}
	got, err := r.Add(ctx, Request{Repo: dir})
	if err != nil || got.ID != "proj_one" || strings.Join(got.Target.VerifyArgv, " ") != "make test" || hooked != 1 ||
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
