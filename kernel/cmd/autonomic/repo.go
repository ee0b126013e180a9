package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/autonomic-kernel/autonomic/kernel/targets"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// repoCmd onboards a repository in one command: `autonomic repo add PATH`
// registers it as a git_commit target of the running kernel (persisted,
// no configuration edit, no restart), with its test command given or
// detected; `autonomic repo list` shows every target.
func repoCmd(args []string, stdout, stderr io.Writer) int {
	const repoUsage = "usage: autonomic repo add PATH [--test CMD] [--setup CMD] [--environment ROOTFS] [--id ID] | repo list [--json]\n"
	if len(args) == 0 || (args[0] != "add" && args[0] != "list") {
		fmt.Fprint(stderr, repoUsage)
		return 2
	}
	o := newOpFlags("repo "+args[0], stderr)
	var test, id, setup, env *string
	if args[0] == "add" {
		setup = o.fs.String("setup", "", `a command run in the workspace before the agent, split at spaces (npm ci, go mod download): its result is kept as a layer by the repository's lockfiles and verification runs on it`)
		env = o.fs.String("environment", "", `the launcher rootfs the target's agents, setup and tests run on (e.g. dev; default: the agent profile's)`)
		test = o.fs.String("test", "", `the command that runs the repository's tests, split at spaces (default: detected: make test, npm test, go test ./..., cargo test or python3 -m pytest)`)
		id = o.fs.String("id", "", "the target's id (default: the repository's directory name)")
	}
	pos, err := o.parse(args[1:])
	if err != nil || (args[0] == "add") != (len(pos) == 1) {
		fmt.Fprint(stderr, repoUsage)
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	if args[0] == "list" {
		list, err := c.Targets(ctx)
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, list)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tREPOSITORY\tTEST\tREFS\tSOURCE")
		for _, e := range list {
			src := "configured"
			if e.Added {
				src = "added"
			}
			refs := append(append([]string(nil), e.Target.AllowedRefs...), suffixAll(e.Target.AllowedRefPrefixes, "*")...)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ID, e.Target.Repo, strings.Join(e.Target.VerifyArgv, " "), strings.Join(refs, ","), src)
		}
		tw.Flush()
		return 0
	}
	repo, err := filepath.Abs(pos[0])
	if err != nil {
		return opFail(stderr, err)
	}
	added, err := c.AddTarget(ctx, targets.Request{Repo: repo, ID: *id, Test: strings.Fields(*test), Setup: strings.Fields(*setup), Environment: *env})
	if err != nil {
		// The kernel's reasons stay in its log (the API carries codes
		// only); what the operator can do about each code is said here.
		switch protocol.AsWire(err).Code {
		case protocol.CodeNotFound:
			fmt.Fprintf(stderr, "autonomic: the kernel's account cannot read %s: it needs to search every directory above it\n"+
				"(e.g. chmod o+x ~) and read the repository; it then takes a bare copy of its own\n", repo)
		case protocol.CodeInvalidField:
			fmt.Fprintf(stderr, "autonomic: %s was not registered: not a git repository, an id or repository already registered (--id),\n"+
				"or no test command found at HEAD (name one with --test \"CMD\"); the kernel's log says which\n", repo)
		}
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, added)
		return 0
	}
	fmt.Fprintf(stdout, "target %s: %s\n", added.ID, added.Target.Repo)
	if added.ClonedFrom != "" {
		fmt.Fprintf(stdout, "(the kernel's own bare copy of %s, which it does not own: agents land in the copy;\n"+
			" fetch their branches from it — once: git config --global --add safe.directory %s\n"+
			" then: git fetch %s 'refs/heads/agent/*:refs/remotes/agent/*')\n", added.ClonedFrom, added.Target.Repo, added.Target.Repo)
	}
	if len(added.Target.Setup) > 0 {
		fmt.Fprintf(stdout, "setup: %s (kept as a layer by the lockfiles at each run's base)\n", strings.Join(added.Target.Setup, " "))
	}
	fmt.Fprintf(stdout, "tests: %s (%s)\nagents land on new branches under %s, verified by the tests\nnext: autonomic run --repo %s --agent codex \"TASK\"\n",
		strings.Join(added.Target.VerifyArgv, " "), added.TestChosen, strings.Join(added.Target.AllowedRefPrefixes, ", "), added.Target.Repo)
	return 0
}

func suffixAll(ss []string, suffix string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s + suffix
	}
	return out
}
