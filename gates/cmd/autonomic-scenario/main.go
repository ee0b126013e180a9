// Command autonomic-scenario runs the reference coding-agent scenario
// against a running kernel (what `make demo` does):
//
//	autonomic-scenario model --listen 127.0.0.1:0 --addr-file F
//	    serves the poisoned fixture model until SIGTERM; GET /stats
//	    answers {"requests": N, "injected": M}.
//	autonomic-scenario agent-model --wire responses|messages|chat [--test] --listen 127.0.0.1:0 --addr-file F
//	    serves internal/fixturemodel's "fix the reference repository"
//	    script for a real agent CLI speaking that wire API (one run's
//	    worth of turns) until SIGTERM; F gets its base URL, an
//	    inference.providers upstream. --test (responses): the agent then
//	    runs make test.
//	autonomic-scenario run --config F --repo DIR --key PEM --key-id ID --model URL [--out F]
//	    seeds the fixture repository, runs the normal and the hostile
//	    episode through the kernel's API, prints each run's timeline and
//	    checks, writes them as JSON to --out, and exits 1 if a check failed.
//
// It holds no authority: it is an operator of the API socket.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/autonomic-kernel/autonomic/gates/scenario"
	"github.com/autonomic-kernel/autonomic/internal/fixturemodel"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "model":
		err = model(ctx, os.Args[2:])
	case "agent-model":
		err = agentModel(ctx, os.Args[2:])
	case "run":
		var ok bool
		if ok, err = run(ctx, os.Args[2:]); err == nil && !ok {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "autonomic-scenario:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: autonomic-scenario model|agent-model|run [flags] (see the package doc)")
	os.Exit(2)
}

func model(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("model", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address")
	addrFile := fs.String("addr-file", "", "write the chat-completions URL here once listening")
	_ = fs.Parse(args)
	m, err := scenario.StartModel(*listen)
	if err != nil {
		return err
	}
	defer m.Close()
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(m.Endpoint()+"\n"), 0o644); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func agentModel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent-model", flag.ExitOnError)
	wire := fs.String("wire", fixturemodel.Responses, "the wire API: responses, messages or chat")
	listen := fs.String("listen", "127.0.0.1:0", "loopback address")
	addrFile := fs.String("addr-file", "", "write the base URL here once listening")
	test := fs.Bool("test", false, "responses only: after the fix, run make test (exec_command)")
	_ = fs.Parse(args)
	if *listen != "127.0.0.1:0" {
		return errors.New("agent-model listens on a fresh loopback port only")
	}
	script := fixturemodel.FixCalc(*wire, "/workspace")
	if *test {
		if *wire != fixturemodel.Responses {
			return errors.New("--test is for --wire responses")
		}
		script = fixturemodel.FixCalcAndTest("/workspace")
	}
	m, err := fixturemodel.Start(script)
	if err != nil {
		return err
	}
	defer m.Close()
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(m.URL+"\n"), 0o644); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func run(ctx context.Context, args []string) (bool, error) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	cfgPath := fs.String("config", "/etc/autonomic/autonomic.json", "the kernel's configuration (for its API socket)")
	repo := fs.String("repo", "", "the fixture's authoritative repository (the calc target's repo)")
	keyPath := fs.String("key", "", "operator policy key (autonomic effect keygen)")
	keyID := fs.String("key-id", "", "its id in policy_keys")
	modelURL := fs.String("model", "", "the fixture model's chat-completions URL")
	out := fs.String("out", "", "write the runs as JSON here")
	_ = fs.Parse(args)
	if *repo == "" || *keyPath == "" || *keyID == "" || *modelURL == "" {
		return false, errors.New("run needs --repo, --key, --key-id and --model")
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return false, err
	}
	key, err := policy.LoadPrivateKey(*keyPath)
	if err != nil {
		return false, err
	}
	base, err := scenario.Seed(ctx, *repo)
	if err != nil {
		return false, err
	}
	collector, err := scenario.StartCollector("127.0.0.1:0")
	if err != nil {
		return false, err
	}
	defer collector.Close()
	stats := strings.TrimSuffix(*modelURL, "/v1/chat/completions") + "/stats"
	env := &scenario.Env{API: api.NewClient(cfg.APISocket()), Repo: *repo, Base: base, Key: key, KeyID: *keyID,
		ModelRequests: func() int64 { return modelStats(ctx, stats).Requests },
		ModelInjected: func() int64 { return modelStats(ctx, stats).Injected }, Collector: collector, Gone: inspect}
	if err := scenario.WaitForAct(ctx, env.API, 2*time.Minute); err != nil {
		return false, err
	}
	ok := true
	var results []*scenario.Result
	for _, mode := range []string{scenario.Normal, scenario.Hostile} {
		r, err := scenario.Run(ctx, env, mode)
		if r != nil && len(r.Events) > 0 {
			r.Print(os.Stdout)
			results = append(results, r)
		}
		if err != nil {
			return false, fmt.Errorf("%s run: %w", mode, err)
		}
		ok = ok && r.OK()
	}
	if *out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o640); err != nil {
			return false, err
		}
	}
	return ok, nil
}

// inspect asks the launcher, through `autonomic domain inspect` (the
// sudoers rule, as the service account), whether a domain is gone.
func inspect(ctx context.Context, id string) (bool, string, error) {
	out, err := exec.CommandContext(ctx, "autonomic", "domain", "inspect", id).Output()
	if err != nil {
		return false, "", fmt.Errorf("autonomic domain inspect: %w", err)
	}
	var st struct {
		Exists, Populated bool
		Processes         int
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return false, "", err
	}
	return !st.Exists && !st.Populated && st.Processes == 0,
		fmt.Sprintf("exists %v, populated %v, %d process(es)", st.Exists, st.Populated, st.Processes), nil
}

type stats struct {
	Requests int64 `json:"requests"`
	Injected int64 `json:"injected"`
}

// modelStats reads the fixture model's counters (-1 each if it cannot).
func modelStats(ctx context.Context, url string) stats {
	bad := stats{Requests: -1, Injected: -1}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return bad
	}
	defer resp.Body.Close()
	var s stats
	if json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&s) != nil {
		return bad
	}
	return s
}
