// Command autonomic is the Autonomic kernel. It runs as the unprivileged
// service account `autonomic` and refuses to run as root: every privileged
// step goes through the launcher, one request at a time.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/seccomp"
)

const usage = `usage: autonomic <command> [flags]

commands:
  run --repo PATH --agent NAME [--ref REF] [--from REV] [--model M] [--lift RULE]... [--key PEM] "TASK"
                                        the main job: the agent fixes TASK in a domain through the kernels' queue;
                                        prints the timeline and the commit that landed, or why nothing did
                                        (interrupting it leaves the task queued or running: task wait ID)
  task submit --spec FILE [--project P] [--priority N] [--min-class N] | list [--state S] [--project P]
       | show ID | cancel ID | events ID | wait ID [--timeout D] | budgets
                                        the durable queue every kernel of the database shares: a kernel with a free
                                        slot runs the task; another takes it over if that kernel is lost
  repo add PATH [--test CMD] [--id ID] | repo list
                                        register a repository with the running kernel (persisted, no restart): its
                                        agents land on new branches under refs/heads/agent/, verified by its tests
  key add ID PUBLIC_KEY | key list      register a policy key with the running kernel (its account or root;
                                        persisted, no restart), or list them
  serve --config FILE                   run the kernel: store (managed cluster when no url), broker, episode controller,
                                        recovery, then the operator API
  preflight [--config FILE] [--json]    what this host and its launcher enforce (and, with a config, the database), with a verdict
  episode list [--limit N] | status ID | start --spec FILE | abort ID --reason TEXT
                 | complete ID --reason TEXT (the driving kernel only)
                 | patch ID (its last git_commit's patch, landed, denied or ref-moved, as git applies it)
  effect list EPISODE | show EFFECT
  action list [--all] [--episode ID] | show ID | approve|deny ID --key FILE --key-id ID
         | snooze ID --for DURATION | dismiss ID --feedback WHY
                                        the decisions the kernel waits on, each bound to one exact operation;
                                        approve and deny sign exactly that operation
  events tail EPISODE [-n N] [--follow] | verify EPISODE | egress EPISODE
                                        operator commands: talk to a running kernel over its API socket
                                        (--socket PATH or --config FILE; --json everywhere)
  mcp [--socket PATH | --config FILE] [--listen UNIX_SOCKET]
                                        the operator API's reads as MCP tools for an orchestrating agent (stdio, or
                                        streamable HTTP on a 0600 Unix socket); no tool approves or grants anything
  egress nets [--config F]              the egress registries' addresses here that the proxy refuses by default
                                        (reserved ranges), one CIDR a line: what egress.allowed_nets would need
  domain run --workspace ID [--profile NAME|FILE] [--json] -- ARGV...
                                        run ARGV in a one-shot domain and print its output and exit report
  domain inspect|freeze|thaw|checkpoint|destroy ID [--json]
  effect keygen --out FILE              a new Ed25519 approval key; prints its public key for decision_keys
  effect approve EFFECT --key FILE --key-id ID [--decision allow|deny] [--config FILE]
                                        sign the class 4 effect's current revision and record the decision
                                        in the running kernel (the worker then commits without carrying it)
  effect approve --key FILE --key-id ID --effect ID --revision N --episode ID --epoch N --payload-digest D
                                        offline: sign exactly that effect revision and print the approval
  effect settle EFFECT --committed|--not-committed --reason TEXT
                                        an operator's word on a commit_unknown effect the target cannot decide
                                        (its target removed): recorded with your uid and reason
  policy sign --key FILE --key-id ID < policy.json
                                        sign a policy document (an effect keygen key; its public key goes in
                                        policy_keys); prints the envelope an episode spec's "policy" carries
  seccomp compile|explain|check ...     the profile compiler (see 'autonomic seccomp')
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if isRoot() {
		fmt.Fprintln(stderr, "autonomic: refusing to run as root; run as the service account (e.g. runuser -u autonomic -- autonomic ...)")
		return 2
	}
	switch args[0] {
	case "seccomp":
		return seccomp.Command(args[1:], stdout, stderr)
	case "preflight":
		return preflight(args[1:], stdout, stderr)
	case "domain":
		return domainCmd(args[1:], stdout, stderr)
	case "effect":
		return effectCmd(args[1:], stdout, stderr)
	case "serve":
		return serveCmd(args[1:], stdout, stderr)
	case "episode":
		return episodeCmd(args[1:], stdout, stderr)
	case "events":
		return eventsCmd(args[1:], stdout, stderr)
	case "policy":
		return policyCmd(args[1:], os.Stdin, stdout, stderr)
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "egress":
		return egressCmd(args[1:], stdout, stderr)
	case "mcp":
		return mcpCmd(args[1:], os.Stdin, stdout, stderr)
	case "repo":
		return repoCmd(args[1:], stdout, stderr)
	case "key":
		return keyCmd(args[1:], stdout, stderr)
	case "action":
		return actionCmd(args[1:], stdout, stderr)
	case "task":
		return taskCmd(args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return 2
}

func backend() *domain.Linux {
	log := hclog.New(&hclog.LoggerOptions{Name: "autonomic", Output: os.Stderr, JSONFormat: !isTerminal(os.Stderr), Level: hclog.Warn})
	d := &domain.Linux{Direct: os.Getenv("AUTONOMIC_NO_SUDO") == "1", Log: log}
	if p := os.Getenv("AUTONOMIC_LAUNCHER"); p != "" {
		d.LauncherPath = p
	}
	return d
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintln(w, string(b))
}

func fail(stderr io.Writer, err error) int {
	w := protocol.AsWire(err)
	fmt.Fprintf(stderr, "autonomic: %s: %s (retryable: %v)\n", w.Code, w.Message, w.Retryable)
	return 1
}

func preflight(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	cfgPath := fs.String("config", "", "configuration file: use its domain backend and check its database too")
	if fs.Parse(args) != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host := backend().Preflight
	var db *api.Check
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "autonomic: %v\n", err)
			return 2
		}
		if h := hostPreflight(cfg, hclog.NewNullLogger()); h != nil {
			host = h
		}
		c := databaseCheck(ctx, cfg)
		db = &c
	}
	rep, err := host(ctx)
	if err != nil {
		return fail(stderr, err)
	}
	if db != nil && !db.OK {
		rep.Verdict = "refused"
		rep.Problems = append(rep.Problems, "database: "+db.Detail)
	}
	if *asJSON {
		if db != nil {
			printJSON(stdout, struct {
				*protocol.PreflightReport
				Database *api.Check `json:"database"`
			}{rep, db})
		} else {
			printJSON(stdout, rep)
		}
	} else {
		if db != nil {
			state := "REACHABLE"
			if !db.OK {
				state = "UNREACHABLE"
			}
			fmt.Fprintf(stdout, "database        %s (%s)\n", state, db.Detail)
		}
		fmt.Fprintf(stdout, "kernel          %s (%s)\n", rep.Kernel, rep.Arch)
		fmt.Fprintf(stdout, "namespaces      %s\n", strings.Join(rep.Namespaces, " "))
		fmt.Fprintf(stdout, "cgroup v2       %v at %s (controllers: %s; freeze %v, kill %v)\n", rep.CgroupV2, rep.CgroupParent, strings.Join(rep.CgroupControllers, " "), rep.CgroupFreeze, rep.CgroupKill)
		for _, l := range rep.Limits {
			state := "ENFORCED"
			if !l.Enforced {
				state = "NOT ENFORCED"
			}
			fmt.Fprintf(stdout, "limit %-10s %s (%s)\n", l.Name, state, l.Reason)
		}
		fmt.Fprintf(stdout, "overlay/userns  %v, idmapped mounts %v\n", rep.OverlayInUserns, rep.IdmappedMounts)
		fmt.Fprintf(stdout, "seccomp         %s (user notification: %v)\n", strings.Join(rep.SeccompActions, " "), rep.SeccompUserNotif)
		fmt.Fprintf(stdout, "rootfs          %s (matches configuration: %v)\n", rep.RootfsDigest, rep.RootfsMatches)
		if len(rep.Rootfses) > 0 {
			fmt.Fprintf(stdout, "rootfses        %s (named, verified against their manifests)\n", strings.Join(rep.Rootfses, " "))
		}
		fmt.Fprintf(stdout, "floor           %s\nlauncher        %s\n", rep.FloorSHA256, rep.LauncherSHA256)
		for _, f := range rep.Features {
			state := "ok"
			if !f.OK {
				state = map[bool]string{true: "MISSING", false: "missing (optional)"}[f.Required]
			}
			fmt.Fprintf(stdout, "feature %-28s %s (%s)\n", f.Name, state, f.Detail)
		}
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "problem         %s\n", p)
		}
		fmt.Fprintf(stdout, "verdict         %s\n", strings.ToUpper(rep.Verdict))
	}
	if rep.Verdict == "refused" {
		return 1
	}
	return 0
}

func domainCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if args[0] == "run" {
		return domainRun(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("domain", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if len(args) < 2 || fs.Parse(args[2:]) != nil {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, id := backend(), args[1]
	var v any
	var err error
	switch args[0] {
	case "inspect":
		v, err = d.Inspect(ctx, id)
	case "freeze":
		v, err = d.Freeze(ctx, id)
	case "thaw":
		v, err = d.Thaw(ctx, id)
	case "checkpoint":
		v, err = d.Checkpoint(ctx, id)
	case "destroy":
		v, err = d.Destroy(ctx, id)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil {
		return fail(stderr, err)
	}
	_ = asJSON // domain state is always printed as JSON: it is small and exact
	printJSON(stdout, v)
	return 0
}

func domainRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("domain run", flag.ContinueOnError)
	ws := fs.String("workspace", "", "workspace id under the launcher's workspaces root")
	profile := fs.String("profile", "worker", "seccomp profile: a shipped name (worker, worker-loopback, agent) or a file; 'none' runs unfiltered")
	id := fs.String("id", "", "domain id (default: generated)")
	asJSON := fs.Bool("json", false, "print the exit report as JSON")
	if fs.Parse(args) != nil || *ws == "" || fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if *id == "" {
		*id = "run-" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")[:20]
	}
	spec := domain.Spec{ID: *id, Generation: 1, WorkspaceID: *ws, Argv: fs.Args(), OneShot: true}
	if *profile != "none" {
		prog, err := server.CompileProfile(*profile)
		if err != nil {
			fmt.Fprintf(stderr, "autonomic: profile: %v\n", err)
			return 1
		}
		spec.Seccomp = prog
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := backend().Create(ctx, spec)
	if err != nil {
		return fail(stderr, err)
	}
	go func() { <-ctx.Done(); _ = r.Close() }()
	ex, err := r.Wait()
	stdout.Write(r.Output())
	if err != nil {
		return fail(stderr, err)
	}
	report := map[string]any{"started": r.Started, "violations": r.Violations(), "exited": ex}
	if *asJSON {
		printJSON(stdout, report)
	} else {
		printJSON(stderr, report)
	}
	if ex.ExitCode != nil {
		return *ex.ExitCode
	}
	return 128 + 9
}

func isRoot() bool { return os.Geteuid() == 0 }
