package authority

import "testing"

// TestForbidGlobVariants: a forbid compares case-insensitively and
// NFKC-normalised, names with control or invisible code points are
// refused, and the default forbid list holds unless every input lifts it.
func TestForbidGlobVariants(t *testing.T) {
	lease := MustCompile(Spec{MaxClass: ClassAuthoritative,
		Grants: []Grant{{Target: "repo", Kind: "git_commit", MaxClass: ClassAuthoritative}},
		Allow:  []string{"**"}, Forbid: []string{"secrets/**", "**/*.pem"},
		Budget: Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 100}})
	check := func(c Capability, p string, exec bool) Reason {
		r := Request{Class: ClassAuthoritative, Kind: "git_commit", Target: "repo", Path: p, Executable: exec, Bytes: 1}
		return c.Check(&r)
	}
	for _, p := range []string{"secrets/x", "Secrets/x", "SECRETS/x", "sEcReTs/deep/x", "ｓｅｃｒｅｔｓ/x", "ＳＥＣＲＥＴＳ/x",
		"a/KEY.PEM", "a/key.ＰＥＭ", "a/key.Pem"} {
		if got := check(lease, p, false); got != DenyPathForbidden {
			t.Errorf("%q: %v, want path_forbidden", p, got)
		}
	}
	for _, p := range []string{".g\u200cit/hooks/x", "a\nb", "lib/\u202eexe.txt", "lib/a\u200db", "a\x00b", "lib/\xff"} {
		if got := check(lease, p, false); got != DenyBadPath {
			t.Errorf("%q: %v, want bad_path", p, got)
		}
	}
	defaults := []string{".gitattributes", "lib/.gitattributes", ".GITATTRIBUTES", ".gitmodules", "vendor/x/.gitmodules",
		".github/workflows/ci.yml", ".GitHub/Workflows/ci.yml", ".gitlab-ci.yml", ".circleci/config.yml"}
	for _, p := range defaults {
		if got := check(lease, p, false); got != DenyPathForbidden {
			t.Errorf("default %q: %v, want path_forbidden", p, got)
		}
	}
	if got := check(lease, "bin/run", true); got != DenyExecutable {
		t.Errorf("executable bit: %v", got)
	}
	if got := check(lease, "lib/ok.go", false); got != Allowed {
		t.Errorf("ordinary path: %v", got)
	}

	// Lifted by the policy alone: the envelope still forbids.
	all := []string{LiftGitAttributes, LiftGitModules, LiftCI, LiftExecutable}
	lifting := MustCompile(Spec{MaxClass: ClassAuthoritative,
		Grants: []Grant{{Target: "repo", Kind: "git_commit", MaxClass: ClassAuthoritative}},
		Allow:  []string{"**"}, Forbid: []string{}, Lift: all,
		Budget: Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 100}})
	if got := check(Intersect(lifting, lease), ".gitmodules", false); got != DenyPathForbidden {
		t.Errorf("one input's lift widened the lease: %v", got)
	}
	if got := check(Intersect(lifting, lease), "bin/run", true); got != DenyExecutable {
		t.Errorf("one input's lift widened the lease: %v", got)
	}
	for _, p := range defaults {
		if got := check(lifting, p, true); got != Allowed {
			t.Errorf("lifted %q: %v", p, got)
		}
	}
	// A lift survives the lease row: Describe, then compile again.
	d := lifting.Describe()
	back := MustCompile(Spec{MaxClass: d.MaxClass, Grants: d.Grants, Allow: d.Allow[0], Forbid: d.Forbid, Budget: d.Budget, Lift: d.Lift})
	if got := check(back, ".gitmodules", true); got != Allowed {
		t.Errorf("lift lost in the description: %v", got)
	}
	if _, err := Compile(Spec{Lift: []string{"everything"}}); err == nil {
		t.Error("an unknown lift compiled")
	}
	if _, err := Compile(Spec{Forbid: []string{"secrets[/**"}}); err == nil {
		t.Error("a malformed forbid compiled")
	}
}
