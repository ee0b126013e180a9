package authority

import "testing"

// TestRunsElsewherePathsNeedALift: files that run elsewhere — CI
// configuration of every common service, git hooks managers, dev
// containers, editor tasks, direnv, package-manager and cargo config —
// and the spellings NTFS and HFS+ read as .gitmodules or .gitattributes
// are forbidden under an allow-all capability, at any letter case, and
// pass only when the capability lifts their rule by name.
func TestRunsElsewherePathsNeedALift(t *testing.T) {
	spec := func(lift ...string) Capability {
		return MustCompile(Spec{MaxClass: 3, Grants: []Grant{{Target: "repo", Kind: "git_commit", MaxClass: 3}},
			Allow: []string{"**"}, Budget: Budget{BytesPerEffect: 1 << 20, BytesTotal: 1 << 30, EffectsPerMinute: 100}, Lift: lift})
	}
	check := func(c Capability, p string) Reason {
		return c.Check(&Request{Class: 3, Kind: "git_commit", Target: "repo", Path: p, Bytes: 1})
	}
	for lift, paths := range map[string][]string{
		LiftCI: {".gitlab/ci/deploy.yml", "bitbucket-pipelines.yml", ".woodpecker.yml", ".woodpecker/build.yaml", "appveyor.yml",
			"cloudbuild.yaml", ".cirrus.yml", "ci/Jenkinsfile", "JENKINSFILE", ".pre-commit-config.yaml", ".husky/pre-commit",
			".devcontainer/devcontainer.json", ".vscode/tasks.json", ".envrc", "sub/.envrc", ".yarnrc.yml", ".npmrc",
			".cargo/config.toml", "crates/x/.cargo/config.toml", ".lfsconfig", ".github/workflows/ci.yml", ".GitHub/Workflows/x.yml",
			"sub/.gitlab-ci.yml"},
		LiftGitModules:    {".gitmodules", ".gitmodules.", ".gitmodules ", ".gitmodules::$DATA", "GITMOD~1", "sub/gitmod~2", "a/.GITMODULES"},
		LiftGitAttributes: {".gitattributes", ".gitattributes.", "GITATT~1", "x/.gitattributes::$DATA"},
	} {
		for _, p := range paths {
			if r := check(spec(), p); r != DenyPathForbidden {
				t.Errorf("%s without a lift: %s, want path_forbidden", p, r)
			}
			if r := check(spec(lift), p); r != Allowed {
				t.Errorf("%s with %s lifted: %s", p, lift, r)
			}
		}
	}
	for _, p := range []string{"src/main.go", "ci/build.sh", "docs/jenkins.md", "gitmodules.md", "README"} {
		if r := check(spec(), p); r != Allowed {
			t.Errorf("%s: %s, want allowed", p, r)
		}
	}
}
