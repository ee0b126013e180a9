package config

import "github.com/autonomic-kernel/autonomic/protocol/pathglob"

// globs refuses, by key, every glob the one matcher (protocol/pathglob)
// would refuse: a malformed glob such as "secrets[/**" must not load and
// then silently match nothing.
func (c *checker) globs(key string, gs []string) {
	for _, g := range gs {
		if err := pathglob.Valid(g); err != nil {
			c.add(key, "%q is not a valid glob (segments are path.Match patterns, ** whole segments)", g)
		}
	}
}

// checkUnverified: unverified_kinds names adapter kinds, never git_commit
// (its rule is tests: verify_argv), each once.
func checkUnverified(c *checker, kinds []string) {
	seen := map[string]bool{}
	for _, k := range kinds {
		switch {
		case k == "git_commit":
			c.add("unverified_kinds", "git_commit is verified by tests (verify_argv); it cannot be unverified")
		case k != "git_remote" && k != "http_read" && k != "http_mutation" && k != "artifact":
			c.add("unverified_kinds", "%q is not an adapter kind", k)
		case seen[k]:
			c.add("unverified_kinds", "%q appears twice", k)
		}
		seen[k] = true
	}
}

// UnverifiedGaps are the kinds with a class 3+ target that automatic
// verification has no rule for: their class 3 and 4 effects are denied at
// evaluate, with a reason naming the kind. Serve warns about them.
func (cfg *Config) UnverifiedGaps() []string {
	if !cfg.AutomaticVerification {
		return nil
	}
	named := map[string]bool{}
	for _, k := range cfg.UnverifiedKinds {
		named[k] = true
	}
	var out []string
	gap := func(kind string, classes []int, def int) {
		for _, c := range classes {
			if c == 0 {
				c = def
			}
			if c >= 3 && !named[kind] {
				out = append(out, kind)
				return
			}
		}
	}
	var remote, read, mut, art []int
	for _, t := range cfg.Targets.HTTPRead {
		read = append(read, t.Class)
	}
	for _, t := range cfg.Targets.GitRemote {
		remote = append(remote, t.Class)
	}
	for _, t := range cfg.Targets.HTTPMutation {
		mut = append(mut, t.Class)
	}
	for _, t := range cfg.Targets.Artifact {
		art = append(art, t.Class)
	}
	gap("git_remote", remote, 3)
	gap("http_read", read, 2)
	gap("http_mutation", mut, 3)
	gap("artifact", art, 4)
	return out
}
