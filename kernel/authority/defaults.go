package authority

import (
	"fmt"
	"slices"
)

// lifts is a set of default forbid rules, one bit per rule.
type lifts uint8

// The default forbid rules. Each is forbidden in every capability unless
// the spec lifts it by name; since Intersect keeps every input's forbids, a
// lease lifts a rule only when the policy, the hard envelope (and a repair
// capability) all do.
//
//   - git_attributes, git_modules: .gitattributes can make git run filters
//     and change what a checkout contains; .gitmodules points the
//     repository at other repositories.
//   - ci: CI configuration runs with the repository's CI secrets on the
//     next push, outside every boundary of ours.
//   - executable: a change that makes a file executable (a new file with
//     mode 100755, or a mode change to it) is a program someone else may run.
//   - dependencies: forbids no path here; lifted, the semantic rule bank
//     no longer rates a change to a dependency manifest or lock file
//     (package.json, go.mod, Cargo.toml, their locks, requirements) as an
//     authority escalation, so a task that adds a dependency can land.
const (
	LiftGitAttributes = "git_attributes"
	LiftGitModules    = "git_modules"
	LiftCI            = "ci"
	LiftExecutable    = "executable"
	LiftDependencies  = "dependencies"
)

var defaultRules = []struct {
	name  string
	globs []string
}{
	// With the spellings NTFS and HFS+ read as the same file: a trailing
	// dot, space or ":$DATA" stream suffix, and the 8.3 short names
	// (compared folded, so GITMOD~1 too).
	{LiftGitAttributes, []string{".gitattributes*", "**/.gitattributes*", "gitatt~*", "**/gitatt~*"}},
	{LiftGitModules, []string{".gitmodules*", "**/.gitmodules*", "gitmod~*", "**/gitmod~*"}},
	// Files that run elsewhere — in CI with its secrets, in a developer's
	// editor, shell or package manager — on the next push or checkout.
	{LiftCI, []string{".github/workflows/**", ".github/actions/**", ".gitlab-ci.yml", "**/.gitlab-ci.yml", ".gitlab/**",
		".circleci/**", ".travis.yml", ".drone.yml", ".buildkite/**", "azure-pipelines.yml", ".azure-pipelines/**",
		"Jenkinsfile", "**/Jenkinsfile", "bitbucket-pipelines.yml", ".woodpecker.yml", ".woodpecker.yaml", ".woodpecker/**",
		"appveyor.yml", ".appveyor.yml", "cloudbuild.yaml", "cloudbuild.yml", "cloudbuild.json", ".cirrus.yml", ".cirrus.star",
		".pre-commit-config.yaml", ".husky/**", ".devcontainer/**", ".devcontainer.json", "**/.devcontainer.json",
		".vscode/tasks.json", ".vscode/launch.json", ".envrc", "**/.envrc", ".yarnrc.yml", ".yarnrc", "**/.yarnrc.yml",
		".npmrc", "**/.npmrc", ".cargo/config.toml", ".cargo/config", "**/.cargo/config.toml", "**/.cargo/config",
		".lfsconfig"}},
	{LiftExecutable, nil},
	{LiftDependencies, nil},
}

// Lifts are the names of the default rules a spec may lift.
func Lifts() []string {
	out := make([]string, len(defaultRules))
	for i, r := range defaultRules {
		out[i] = r.name
	}
	return out
}

// Lifted reports whether c lifts the named default rule: the policy, the
// envelope and any repair capability all lifted it.
func (c Capability) Lifted(name string) bool { return c.ok && c.lifted.has(name) }

// DefaultForbids lists the default rules and their globs, for operators.
func DefaultForbids() map[string][]string {
	out := map[string][]string{}
	for _, r := range defaultRules {
		out[r.name] = slices.Clone(r.globs)
	}
	return out
}

func parseLifts(names []string) (lifts, error) {
	var l lifts
	for _, n := range names {
		i := slices.IndexFunc(defaultRules, func(r struct {
			name  string
			globs []string
		}) bool {
			return r.name == n
		})
		if i < 0 {
			return 0, fmt.Errorf("lift: %q is not a default rule", n)
		}
		l |= 1 << i
	}
	return l, nil
}

func (l lifts) has(name string) bool {
	for i, r := range defaultRules {
		if r.name == name {
			return l&(1<<i) != 0
		}
	}
	return false
}

func (l lifts) names() []string {
	var out []string
	for i, r := range defaultRules {
		if l&(1<<i) != 0 {
			out = append(out, r.name)
		}
	}
	return out
}

// defaultForbids compiles the globs of every rule not lifted. They are
// fixed and known to compile.
func defaultForbids(l lifts) []glob {
	var out []glob
	for i, r := range defaultRules {
		if l&(1<<i) != 0 {
			continue
		}
		for _, src := range r.globs {
			g, err := compileForbid(src)
			if err != nil {
				panic(err)
			}
			out = append(out, g)
		}
	}
	return out
}
