package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/autonomic-kernel/autonomic/protocol"
)

// TestCaseAndNormalisationCollisionsRefused: a change whose resulting tree
// holds two paths (or directories) equal after case folding and NFC —
// one file on macOS and Windows — is refused at prepare, and so is a name
// Windows cannot check out unless the target admits them; a rename that
// only changes case, and an ordinary file, land. The ref never moves on a
// refusal.
func TestCaseAndNormalisationCollisionsRefused(t *testing.T) {
	f := newGitFixture(t)
	var gc *GitCommit
	e := gitEnv(t, f, &gc)
	base := f.head()
	write := func(d string, files ...string) {
		for _, p := range files {
			full := filepath.Join(d, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, files := range map[string][]string{
		"case beside the base":  {"lib/AUTH.go"},
		"case in the change":    {"lib/calc.sh", "lib/CALC.sh"},
		"directories":           {"lib/Sub/a.go", "lib/sub/b.go"},
		"NFC and NFD":           {"lib/caf\u00e9.go", "lib/cafe\u0301.go"},
		"folded ß":              {"lib/stra\u00dfe.go", "lib/STRASSE.go"},
		"device name":           {"lib/CON"},
		"device with extension": {"lib/com1.txt"},
		"colon":                 {"lib/a:b"},
		"trailing dot":          {"lib/x."},
		"trailing space":        {"lib/x "},
		"reserved characters":   {"lib/a?b"},
	} {
		t.Run(name, func(t *testing.T) {
			patch := f.patch(func(d string) { write(d, files...) })
			wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), patch)), protocol.CodeForbidden)
		})
	}
	if f.head() != base {
		t.Fatal("a refused patch moved the ref")
	}
	// A rename that changes only case leaves one spelling: it lands, as
	// does an ordinary new file.
	for name, edit := range map[string]func(string){
		"case rename": func(d string) {
			if err := os.Rename(filepath.Join(d, "lib/auth.go"), filepath.Join(d, "lib/Auth.go")); err != nil {
				t.Fatal(err)
			}
		},
		"ordinary": func(d string) { write(d, "lib/other.go") },
	} {
		t.Run(name, func(t *testing.T) {
			mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(edit))))
		})
	}
	// A target that admits names Windows cannot check out: they pass;
	// collisions still do not.
	tg := gc.Targets["repo"]
	tg.AllowNonPortable = true
	gc.Targets["repo"] = tg
	mustOK(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) { write(d, "lib/a:b") }))))
	wantErr(t, e.do(prepareReq(e, "git_commit", "repo", gitTarget(base), f.patch(func(d string) { write(d, "lib/AUTH.go") }))), protocol.CodeForbidden)
}

func TestPortableName(t *testing.T) {
	for p, want := range map[string]bool{
		"src/main.go": true, "a/b.c.d": true, "console.log": true, "comma.txt": true, "lpt.txt": true,
		"CON": false, "x/con.txt": false, "Aux": false, "nul.tar.gz": false, "COM9": false, "lpt1": false,
		"a:b": false, "a<b": false, "x.": false, "x ": false, "a\x01b": false, `a\b`: false,
	} {
		if portableName(p) != want {
			t.Errorf("portableName(%q) = %v", p, !want)
		}
	}
}
