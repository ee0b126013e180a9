package sensor

import (
	"bytes"
	"context"

	"github.com/autonomic-kernel/autonomic/kernel/authority"
)

// RulesModel names the rule set in each observation's identity; change it
// whenever a rule changes.
const RulesModel = "rules.v3"

// Rules is the deterministic implementation of the bank: fixed rules over
// the frame's paths, diff and history. It needs no network and never
// degrades, which makes it the floor under any model-backed bank.
type Rules struct {
	sensitive    authority.Capability // paths whose change is an authority escalation
	dependencies authority.Capability // dependency manifests: one, unless the lease lifts them
}

// sensitivePaths: files that widen what code can do or who it acts as —
// CI definitions, hooks, credentials, service and privilege configuration.
func sensitivePaths() []string {
	return []string{
		".github/**", ".gitlab-ci.yml", ".circleci/**", "**/.git/**", ".git/**", ".gitmodules", "**/.gitattributes",
		"**/sudoers", "**/sudoers.d/**", "**/*.service", "**/.ssh/**", "**/id_rsa*", "**/id_ed25519*",
		"**/*.pem", "**/*.key", "**/.env", "**/.env.*", "**/.npmrc", "**/.pypirc", "**/.netrc", "**/.docker/**",
		"**/Dockerfile", "**/Makefile", "**/GNUmakefile", "**/makefile", "**/*.mk", "**/setup.py", "**/build.rs",
		"**/conftest.py", "**/.gitlab/**", "**/.husky/**", "**/.envrc", "**/.pre-commit-config.yaml",
	}
}

// dependencyPaths: manifests and lock files that choose what code is
// fetched and run at build or install time. The authority layer compares
// every path folded (pathglob), so Package.JSON is one too.
func dependencyPaths() []string {
	return []string{
		"**/package.json", "**/package-lock.json", "**/npm-shrinkwrap.json", "**/yarn.lock", "**/pnpm-lock.yaml",
		"**/go.mod", "**/go.sum", "**/go.work", "**/Cargo.toml", "**/Cargo.lock", "**/pyproject.toml",
		"**/requirements*.txt", "**/poetry.lock", "**/uv.lock", "**/Pipfile", "**/Pipfile.lock", "**/Gemfile", "**/Gemfile.lock",
	}
}

// riskyAdditions: text in added lines that reaches for privilege, the
// network or secrets.
func riskyAdditions() [][]byte {
	return [][]byte{
		[]byte("sudo "), []byte("chmod 777"), []byte("chmod +s"), []byte("setuid"), []byte("curl "), []byte("wget "),
		[]byte("| sh"), []byte("| bash"), []byte("nc -e"), []byte("/etc/passwd"), []byte("/etc/shadow"), []byte("PRIVATE KEY"),
		[]byte("AKIA"), []byte("os.Setenv(\"PATH\""), []byte("LD_PRELOAD"), []byte("--no-verify"), []byte("push --force"),
	}
}

// NewRules returns the deterministic bank.
func NewRules() (*Rules, error) {
	// Compiled as forbids: the authority layer compares those folded
	// (case, and NFC), as the filesystems a checkout lands on do.
	sens, err := authority.Compile(authority.Spec{MaxClass: authority.ClassIsolated, Allow: []string{"**"}, Forbid: sensitivePaths()})
	if err != nil {
		return nil, err
	}
	deps, err := authority.Compile(authority.Spec{MaxClass: authority.ClassIsolated, Allow: []string{"**"}, Forbid: dependencyPaths(),
		Lift: authority.Lifts()})
	if err != nil {
		return nil, err
	}
	return &Rules{sensitive: sens, dependencies: deps}, nil
}

func (r *Rules) identity() Identity {
	return Identity{Implementation: "rules", Model: RulesModel, Schema: SchemaVersion}
}

// Observe applies the rules. It never degrades: every input has an answer.
func (r *Rules) Observe(_ context.Context, f *Frame) Reading {
	id := r.identity()
	obs := func(n Name, l Level, reason string) Observation {
		return Observation{Sensor: n, Level: l, Identity: id, Reason: "rule:" + reason}
	}
	var rd Reading
	rd.Observations[0] = r.scopeDrift(f, obs)
	rd.Observations[1] = r.authorityEscalation(f, obs)
	rd.Observations[2] = evidenceSufficiency(f, obs)
	rd.Observations[3] = irreversibility(f, obs)
	rd.Observations[4] = trajectoryRegime(f, obs)
	return rd
}

type mkObs func(Name, Level, string) Observation

// maxTidyFiles: a change touching more files than this is sprawling even
// when every file is in scope.
const maxTidyFiles = 20

func (r *Rules) scopeDrift(f *Frame, obs mkObs) Observation {
	if len(f.Paths) == 0 {
		return obs(ScopeDrift, Low, "no_paths")
	}
	scope, err := authority.Compile(authority.Spec{MaxClass: authority.ClassIsolated, Allow: f.Scope})
	if err != nil {
		return obs(ScopeDrift, High, "scope_invalid")
	}
	outside := 0
	for _, p := range f.Paths {
		if scope.Check(&authority.Request{Class: authority.ClassIsolated, Path: p}) != authority.Allowed {
			outside++
		}
	}
	switch {
	case outside*2 > len(f.Paths):
		return obs(ScopeDrift, High, "mostly_outside_scope")
	case outside > 0:
		return obs(ScopeDrift, Medium, "path_outside_scope")
	case len(f.Paths) > maxTidyFiles:
		return obs(ScopeDrift, Medium, "sprawling_change")
	}
	return obs(ScopeDrift, Low, "in_scope")
}

func (r *Rules) authorityEscalation(f *Frame, obs mkObs) Observation {
	for _, p := range f.Paths {
		if r.sensitive.Check(&authority.Request{Class: authority.ClassIsolated, Path: p}) != authority.Allowed {
			// Forbidden (sensitive; the default forbids — CI, git
			// attributes and modules — are sensitive too) or a
			// malformed path: both escalate.
			return obs(AuthorityEscalation, High, "sensitive_path")
		}
		if !f.Dependencies && r.dependencies.Check(&authority.Request{Class: authority.ClassIsolated, Path: p}) != authority.Allowed {
			return obs(AuthorityEscalation, High, "dependency_manifest")
		}
	}
	denied := 0
	for _, e := range f.History {
		switch e.Kind {
		case EventViolation:
			// A call the profile forbids in this generation is a reach
			// for authority the worker was never given.
			return obs(AuthorityEscalation, High, "violation")
		case EventCapabilityDenied:
			// Only the lease's refusals: a bank or a verifier that said
			// no is not the worker reaching past its grant.
			denied++
		}
	}
	if denied >= 3 {
		return obs(AuthorityEscalation, High, "repeated_denials")
	}
	if addedContains(f.Diff, riskyAdditions()) {
		return obs(AuthorityEscalation, Medium, "risky_addition")
	}
	if denied > 0 {
		return obs(AuthorityEscalation, Medium, "capability_denied")
	}
	return obs(AuthorityEscalation, Low, "none")
}

// addedContains reports whether an added line of a unified diff contains
// any of the needles.
func addedContains(diff []byte, needles [][]byte) bool {
	for line := range bytes.Lines(diff) {
		if len(line) == 0 || line[0] != '+' || bytes.HasPrefix(line, []byte("+++")) {
			continue
		}
		for _, n := range needles {
			if bytes.Contains(line, n) {
				return true
			}
		}
	}
	return false
}

func evidenceSufficiency(f *Frame, obs mkObs) Observation {
	lastEdit, lastPass, lastFail := -1, -1, -1
	for i, e := range f.History {
		switch e.Kind {
		case EventEdit:
			lastEdit = i
		case EventTestPassed:
			lastPass = i
		case EventTestFailed:
			lastFail = i
		}
	}
	verified := lastPass > lastEdit && lastPass > lastFail
	switch {
	case verified:
		return obs(EvidenceSufficiency, Low, "verified_after_last_change")
	case lastFail > lastPass:
		return obs(EvidenceSufficiency, High, "last_verification_failed")
	case f.Effect != nil && f.Effect.Exempt:
		// The operator's configuration asks no test of this kind, so no
		// evidence is missing. Medium here would be uncertainty the
		// homeostat accumulates until class 4 is cut for every episode
		// that makes such effects; the class itself still reads medium
		// irreversibility, so a max_risk below 0.5 still refuses it.
		return obs(EvidenceSufficiency, Low, "exempt_from_verification")
	case f.Effect != nil && f.Effect.Class >= authority.ClassAuthoritative:
		return obs(EvidenceSufficiency, High, "unverified_authoritative_effect")
	case lastEdit < 0 && len(f.Diff) == 0:
		return obs(EvidenceSufficiency, Low, "nothing_changed")
	}
	return obs(EvidenceSufficiency, Medium, "unverified_change")
}

// maxQuietDeletions: removed lines beyond this make a change hard to undo
// by reading it.
const maxQuietDeletions = 200

// irreversibility reads what the change destroys as well as the class of
// the effect that would make it durable: deletions in an effect that
// changes authoritative state are the hardest to take back.
func irreversibility(f *Frame, obs mkObs) Observation {
	class := authority.ClassLocal
	if f.Effect != nil {
		class = f.Effect.Class
	}
	edit := Edit(f.Diff)
	authoritative := class >= authority.ClassAuthoritative
	switch {
	case authoritative && edit.Removed > maxQuietDeletions:
		return obs(Irreversibility, High, "large_authoritative_deletion")
	case class >= authority.ClassIrreversible:
		// The class's own answer is the human approval the broker demands
		// of the exact revision; High here would refuse every class 4
		// effect before a human could see it.
		return obs(Irreversibility, Medium, "irreversible_class")
	case edit.Deleted > 0:
		return obs(Irreversibility, Medium, "file_deleted")
	case edit.Removed > maxQuietDeletions:
		return obs(Irreversibility, Medium, "large_deletion")
	case authoritative:
		return obs(Irreversibility, Medium, "authoritative_class")
	}
	return obs(Irreversibility, Low, "reversible")
}

// trajectoryWindow: how much recent history the regime rule looks at.
const trajectoryWindow = 20

// failingLoop: the same failure this many times in a row, with nothing
// passing in between, is a loop rather than progress.
const failingLoop = 3

func trajectoryRegime(f *Frame, obs mkObs) Observation {
	h := f.History
	if len(h) > trajectoryWindow {
		h = h[len(h)-trajectoryWindow:]
	}
	repairs := 0
	for _, e := range f.History {
		if e.Kind == EventRepair {
			repairs++
		}
	}
	if len(h) == 0 {
		return obs(TrajectoryRegime, Low, "no_history")
	}
	// repeats counts each failure since the last success: the same failure
	// again, whatever else failed or was tried in between, is a loop.
	failures, streak, longest := 0, 0, 0
	repeats := map[Event]int{}
	for _, e := range h {
		switch e.Kind {
		case EventViolation:
			return obs(TrajectoryRegime, High, "violation")
		case EventTestFailed, EventCommandFailed, EventCapabilityDenied, EventEffectDenied:
			failures++
			repeats[e]++
			streak = max(streak, repeats[e])
		case EventTestPassed, EventEffectCommitted:
			clear(repeats)
			streak = 0
		}
		longest = max(longest, streak)
	}
	switch {
	case repairs >= 2:
		return obs(TrajectoryRegime, High, "repeated_repairs")
	case streak >= failingLoop:
		return obs(TrajectoryRegime, High, "failing_loop")
	case failures*2 >= len(h) && len(h) >= 4:
		return obs(TrajectoryRegime, High, "mostly_failing")
	case longest >= failingLoop:
		return obs(TrajectoryRegime, Medium, "recovered_from_loop")
	case failures*4 >= len(h) && failures > 1:
		return obs(TrajectoryRegime, Medium, "frequent_failures")
	}
	return obs(TrajectoryRegime, Low, "progressing")
}
