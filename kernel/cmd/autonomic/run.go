package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	agent "github.com/autonomic-kernel/autonomic/agents"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/authority"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/protocol/gitref"
	"github.com/autonomic-kernel/autonomic/store"
)

// DefaultConfig is where install.sh's operator finds the kernel's
// configuration.
const DefaultConfig = "/etc/autonomic/autonomic.json"

// runCmd is the main job in one command: an agent, a repository and a
// task become an episode of the running kernel, whose timeline is printed
// as it happens, ending with the commit that landed or why none did.
//
// The kernel stays the authority: the repository must be one of its
// configured git_commit targets (it never writes a path an operator names
// at run time), and the policy is signed here, with the operator's own key,
// whose public half the kernel's policy_keys must already hold.
func runCmd(args []string, stdout, stderr io.Writer) int {
	o := newOpFlags("run", stderr)
	repo := o.fs.String("repo", "", "the repository: a configured git_commit target's repo")
	agentName := o.fs.String("agent", "", "the agent profile (codex, claude, opencode)")
	ref := o.fs.String("ref", "", "the ref the change lands on (default: a new branch PREFIX<agent>/<id> under the target's first allowed_ref_prefixes, else its refs/heads/agent/<agent>, or its only allowed ref)")
	from := o.fs.String("from", "HEAD", "the commit a new branch starts from (a ref or commit of the repository)")
	model := o.fs.String("model", "", "the model the agent asks for (default: the profile's, if the provider serves it)")
	keyPath := o.fs.String("key", "", "the operator's policy key (default $AUTONOMIC_OPERATOR_KEY or ~/.config/autonomic/operator.pem; made on first use)")
	var lifts []string
	o.fs.Func("lift", "lift a default rule in the signed policy, by name (repeatable): "+strings.Join(authority.Lifts(), ", "), func(v string) error {
		if !slices.Contains(authority.Lifts(), v) {
			return fmt.Errorf("%q is not a default rule (%s)", v, strings.Join(authority.Lifts(), ", "))
		}
		if !slices.Contains(lifts, v) {
			lifts = append(lifts, v)
		}
		return nil
	})
	wait := o.fs.Duration("wait", 30*time.Minute, "give up following the task after this long (it goes on; the episode's own wall time bounds the agent)")
	priority := o.fs.Int("priority", 0, "the task's priority in the queue (-1000..1000; higher runs first)")
	pos, err := o.parse(args)
	if err != nil || len(pos) != 1 || *repo == "" || *agentName == "" || strings.TrimSpace(pos[0]) == "" {
		fmt.Fprintln(stderr, `usage: autonomic run --repo PATH --agent NAME [--ref REF] [--model M] [--lift RULE]... [--key PEM] [--config FILE] "TASK"`)
		return 2
	}
	task := pos[0]
	// An agent this build does not ship is named as such, first.
	if _, err := agent.Load(*agentName); err != nil {
		fmt.Fprintf(stderr, "autonomic: --agent: %v\n", err)
		return 2
	}
	cfgPath := *o.cfg
	if cfgPath == "" {
		cfgPath = DefaultConfig
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "autonomic: run needs the kernel's configuration (--config): %v\n", err)
		return 2
	}
	if *o.socket == "" {
		*o.socket = cfg.APISocket()
	}

	// The operator's key: made on first use; the kernel must know it.
	if *keyPath == "" {
		if *keyPath, err = defaultKeyPath(); err != nil {
			fmt.Fprintln(stderr, "autonomic:", err)
			return 2
		}
	}
	key, err := loadOrMakeKey(*keyPath)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic: operator key:", err)
		return 1
	}
	if key.made {
		fmt.Fprintf(stdout, "operator key %s made at %s\n", key.keyID, key.path)
	}
	if !key.registered(cfg.PolicyKeys) && !key.registered(kernelKeys(*o.socket)) {
		fmt.Fprintf(stderr, "autonomic: the kernel does not know operator key %s; register its public half with the running kernel\n"+
			"(as the kernel's account or root, no restart):\n  sudo -u autonomic autonomic key add %s %s\n"+
			"or add  \"%s\": \"%s\"  to policy_keys in %s and restart the kernel\n", key.keyID, key.keyID, key.pub, key.keyID, key.pub, cfgPath)
		return 2
	}

	// The repository: only a configured target, resolved on the host's
	// real path, so a symlink cannot name another.
	real, err := filepath.EvalSymlinks(*repo)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		fmt.Fprintf(stderr, "autonomic: --repo: %v\n", err)
		return 2
	}
	targetID, target, ok := targetFor(cfg, real)
	if !ok {
		// Registered while the kernel runs (autonomic repo add)?
		targetID, target, ok = addedTargetFor(*o.socket, real)
	}
	if !ok {
		fmt.Fprintf(stderr, "autonomic: %s is not a git_commit target of this kernel; register it: autonomic repo add %s\n", real, real)
		return 2
	}
	if *ref == "" {
		if *ref, err = defaultRef(target, *agentName); err != nil {
			fmt.Fprintln(stderr, "autonomic:", err)
			return 2
		}
	} else if !slices.Contains(target.AllowedRefs, *ref) && !gitref.Under(*ref, target.AllowedRefPrefixes) {
		fmt.Fprintf(stderr, "autonomic: --ref %s is not among the target's allowed_refs (%s) or under its allowed_ref_prefixes (%s)\n",
			*ref, strings.Join(target.AllowedRefs, ", "), strings.Join(target.AllowedRefPrefixes, ", "))
		return 2
	}
	// The agent starts from the ref's commit, and the change lands on the
	// ref as a fast-forward (git_commit's precondition): a ref that moves
	// meanwhile refuses the change. A branch under an allowed prefix that
	// does not exist yet starts from --from, and landing creates it: runs
	// on their own branches never meet.
	base, err := gitRef(real, *ref)
	create := false
	if err != nil && gitref.Under(*ref, target.AllowedRefPrefixes) && !refExists(real, *ref) {
		if base, err = gitRef(real, *from); err != nil {
			fmt.Fprintf(stderr, "autonomic: --from: %v\n", err)
			return 2
		}
		create = true
	}
	if err != nil {
		fmt.Fprintf(stderr, "autonomic: --repo: %v (create %s at the commit the agent should start from)\n", err, *ref)
		return 2
	}
	// The environment: the target's own, else dev when this host's
	// launcher has it (verified against its manifest), else the agent
	// profile's rootfs.
	envNote := ""
	if target.Environment == "" && launcherHas(*o.socket, DefaultEnvironment) {
		target.Environment, envNote = DefaultEnvironment, ", the default environment"
	}
	spec, prof, provider, err := agentSpec(agentRun{Agent: *agentName, Task: task, Repo: real, Base: base, Ref: *ref,
		TargetID: targetID, Target: target, Key: key, Model: *model, Cfg: cfg, Lifts: lifts, Create: create})
	if err != nil {
		fmt.Fprintln(stderr, "autonomic:", err)
		return 2
	}

	c := api.NewClient(*o.socket)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelWait := context.WithTimeout(ctx, *wait)
	defer cancelWait()
	// The run is a task in the kernels' queue: it survives this command.
	// A kernel claims it only while its autonomy allows the class the
	// commit needs (a lease minted below it could never land it).
	t, err := c.SubmitTask(ctx, api.TaskRequest{Project: projectOf(targetID), Priority: *priority, MinClass: needClass(target), Spec: spec})
	if err != nil {
		return opFail(stderr, err)
	}
	fmt.Fprintf(stdout, "task %s queued (project %s); interrupting this command leaves it to the kernels: autonomic task wait %s\n",
		t.ID, t.Project, t.ID)
	onto := "at"
	if create {
		onto = "new, from"
	}
	rootfs := prof.Rootfs
	if target.Environment != "" {
		rootfs = target.Environment
	}
	started := func(ep string) {
		fmt.Fprintf(stdout, "episode %s: %s (rootfs %s%s, wall time %s) through provider %s on %s (%s %s %s)\n",
			ep, *agentName, rootfs, envNote, prof.WallTime(), provider, targetID, *ref, onto, short(base))
		if len(target.Setup) > 0 {
			fmt.Fprintf(stdout, "setup: %s (from its layer when the lockfiles at the base have one)\n", strings.Join(target.Setup, " "))
		}
		if len(lifts) > 0 {
			fmt.Fprintf(stdout, "the signed policy lifts: %s\n", strings.Join(lifts, ", "))
		}
	}
	return followTask(ctx, c, t.ID.String(), *o.json, started, stdout, stderr)
}

// DefaultEnvironment is the rootfs `autonomic run` chooses for a target
// that names none, where the launcher has it: rootfs-builder/specs/dev.json
// (Go, Node with npm, Python 3 with pytest and venv, C/C++, make, git, the
// agent CLIs on top), which install.sh builds where mmdebstrap reaches a
// Debian mirror.
const DefaultEnvironment = "dev"

// launcherHas reports whether the kernel's launcher lists rootfs name as
// one a create may name now (its preflight, through the kernel's API). An
// unanswered preflight is a no: the run falls back to the profile's rootfs
// rather than to one it cannot know is there.
func launcherHas(socket, name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := api.NewClient(socket).Preflight(ctx)
	return err == nil && v.Host != nil && slices.Contains(v.Host.Rootfses, name)
}

// projectOf is the queue project a target's runs belong to: its id,
// lowercased, with what a project name cannot hold replaced.
func projectOf(targetID string) string {
	b := []byte(strings.ToLower(targetID))
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			b[i] = '-'
		}
	}
	p := string(b)
	if len(p) > 64 {
		p = p[:64]
	}
	if !config.ProjectPattern.MatchString(p) {
		return "default"
	}
	return p
}

// followPoll is how often a follower asks the kernel for what is new:
// two local API reads, and what a run waits at most after its task ends.
const followPoll = 100 * time.Millisecond

// followTask follows a task: each episode it runs, as follow prints it,
// until the task is final. A task whose kernel was lost runs again as a
// new episode, which is followed in turn. It is a reader: interrupting it
// leaves the task to the kernels.
func followTask(ctx context.Context, c *api.Client, id string, asJSON bool, started func(ep string), stdout, stderr io.Writer) int {
	code, cur, said := 1, "", false
	for {
		t, err := c.Task(ctx, id)
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(stderr, "autonomic: stopped following task %s (%v); it goes on: autonomic task wait %s\n", id, context.Cause(ctx), id)
			return 1
		case err != nil:
			return opFail(stderr, err)
		case t.EpisodeID != nil && t.EpisodeID.String() != cur:
			if cur != "" {
				fmt.Fprintf(stdout, "task %s: its kernel was lost; another took it over (takeover %d) and runs it again whole\n", id, t.Takeovers)
			}
			cur = t.EpisodeID.String()
			started(cur)
			if code = follow(ctx, c, cur, asJSON, stdout, stderr); ctx.Err() != nil {
				fmt.Fprintf(stderr, "autonomic: the task goes on: autonomic task wait %s\n", id)
				return code
			}
			continue
		case t.State.Done():
			if cur == "" || t.State != store.TaskEnded {
				printTask(stdout, t)
				return taskExit(t)
			}
			return code
		case t.State == store.TaskQueued && !said && time.Since(t.CreatedAt) > 2*time.Second:
			said = true
			why := ""
			if v, err := c.Kernel(ctx); err == nil && v.Autonomy != "" && v.MaxClass < t.MinClass {
				why = fmt.Sprintf(" (this kernel's autonomy is %s, class %d; faults %q)", v.Autonomy, v.MaxClass, v.Faults)
			}
			fmt.Fprintf(stdout, "waiting for a kernel with a free slot and autonomy for class %d%s\n", t.MinClass, why)
		}
		select {
		case <-ctx.Done():
		case <-time.After(followPoll):
		}
	}
}

// follow prints the episode's ledger as it grows until the episode has
// ended, then its outcome. It is a reader: interrupting it leaves the
// episode running.
func follow(ctx context.Context, c *api.Client, id string, asJSON bool, stdout, stderr io.Writer) int {
	after := int64(-1)
	for {
		es, err := c.Events(ctx, id, after, 200)
		if err != nil && ctx.Err() == nil {
			return opFail(stderr, err)
		}
		for _, e := range es {
			if asJSON {
				b, _ := json.Marshal(e)
				fmt.Fprintln(stdout, string(b))
			} else {
				fmt.Fprintf(stdout, "%s  epoch %-3d %s\n", e.At.Local().Format(time.TimeOnly), e.Epoch, api.DescribeEvent(e.Kind, e.Body))
			}
			after = e.Seq
		}
		v, err := c.Episode(ctx, id)
		if err == nil && v.Live == nil && len(es) == 0 {
			return outcome(v, stdout)
		}
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "autonomic: stopped following %s (%v); it goes on: autonomic episode status %s\n", id, context.Cause(ctx), id)
			return 1
		}
		select {
		case <-ctx.Done():
		case <-time.After(followPoll):
		}
	}
}

// outcome prints how the episode ended; only a landed change is success.
func outcome(v api.EpisodeView, stdout io.Writer) int {
	o := v.Outcome
	if o != nil && o.Ignored > 0 {
		sample := make([]string, len(o.IgnoredSample))
		for i, n := range o.IgnoredSample {
			sample[i] = strconv.QuoteToASCII(n)
		}
		fmt.Fprintf(stdout, "ignored by the repository's ignore rules, not part of the change: %d paths (%s)\n", o.Ignored, strings.Join(sample, ", "))
	}
	switch {
	case o == nil:
		fmt.Fprintf(stdout, "episode %s ended %s: nothing landed (it did not end by itself)\n", v.ID, v.State)
	case o.Kind == episode.OutcomeLanded:
		fmt.Fprintf(stdout, "landed: %s at %s (effect %s)\n", o.Ref, o.Commit, o.Effect)
		return 0
	default:
		why := string(o.Kind)
		if o.Code != "" {
			why += " (" + o.Code + ")"
		}
		if o.Reason != "" {
			why += ": " + o.Reason
		}
		fmt.Fprintf(stdout, "episode %s ended %s, nothing landed: %s\n", v.ID, v.State, why)
	}
	return 1
}

// targetFor finds the configured git_commit target whose repository is
// repo (its git dir, or the work tree around it).
func targetFor(cfg *config.Config, repo string) (string, config.GitCommitTarget, bool) {
	for id, t := range cfg.Targets.GitCommit {
		if sameRepo(t.Repo, repo) {
			return id, t, true
		}
	}
	return "", config.GitCommitTarget{}, false
}

// kernelKeys are the policy keys the running kernel holds (configured and
// registered with autonomic key add); none when it cannot be asked.
func kernelKeys(socket string) map[string]string {
	ctx, cancel := opCtx()
	defer cancel()
	keys, _ := api.NewClient(socket).PolicyKeys(ctx)
	return keys
}

// addedTargetFor asks the running kernel for a target registered with
// autonomic repo add (not in the configuration file).
func addedTargetFor(socket, repo string) (string, config.GitCommitTarget, bool) {
	ctx, cancel := opCtx()
	defer cancel()
	list, err := api.NewClient(socket).Targets(ctx)
	if err != nil {
		return "", config.GitCommitTarget{}, false
	}
	for _, e := range list {
		if sameRepo(e.Target.Repo, repo) {
			return e.ID, e.Target, true
		}
	}
	return "", config.GitCommitTarget{}, false
}

// sameRepo: the target's git dir is repo, or repo's .git.
func sameRepo(gitDir, repo string) bool {
	r, err := filepath.EvalSymlinks(gitDir)
	return err == nil && (r == repo || r == filepath.Join(repo, ".git"))
}

// refExists reports whether ref is a ref of the repository (a name that
// does not resolve may still exist, pointing at no commit).
func refExists(repo, ref string) bool {
	cmd := exec.Command("git", append(readOnly(repo), "show-ref", "--verify", "--quiet", ref)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	return cmd.Run() == nil
}

// readOnly is how the operator's git reads the kernel's repository: it is
// owned by the kernel's account, so git's ownership check would refuse it
// ("dubious ownership"); that one directory is trusted for these reads,
// with hooks and fsmonitor off.
func readOnly(repo string) []string {
	return []string{"-c", "safe.directory=" + repo, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-C", repo}
}

// gitRef is the commit ref names in the repository, as the operator sees it.
func gitRef(repo, ref string) (string, error) {
	cmd := exec.Command("git", append(readOnly(repo), "rev-parse", "--verify", ref+"^{commit}")...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("no commit at %s: %s", ref, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// needClass is the class the target's git_commit carries (3 unless the
// target says otherwise), as agentSpec grants it.
func needClass(t config.GitCommitTarget) int {
	if t.Class > 0 {
		return t.Class
	}
	return 3
}
