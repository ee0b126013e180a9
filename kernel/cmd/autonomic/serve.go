package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/kernel/domain"
	"github.com/autonomic-kernel/autonomic/kernel/server"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

// serveCmd runs the kernel: the authority store (a managed cluster when no
// URL is configured), the broker, the episode controller and the operator
// API. Logs carry ids, codes and
// states only: never payloads, prompts, worker output or credentials.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (see config/autonomic.example.json)")
	level := fs.String("log-level", "info", "trace, debug, info, warn or error")
	if fs.Parse(args) != nil || *path == "" || fs.NArg() != 0 || hclog.LevelFromString(*level) == hclog.NoLevel {
		fmt.Fprintln(stderr, "usage: autonomic serve --config FILE [--log-level LEVEL]")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "autonomic: %v\n", err)
		return 2
	}
	notify := takeNotifier()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := hclog.New(&hclog.LoggerOptions{Name: "autonomic", Output: stderr, JSONFormat: !isTerminalWriter(stderr), Level: hclog.LevelFromString(*level)})
	go func() {
		<-ctx.Done()
		notify.send("STOPPING=1")
	}()
	if err := server.Serve(ctx, cfg, log, serveHooks(notify)); err != nil {
		log.Error("kernel stopped", "error", err)
		return 1
	}
	return 0
}

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// hostPreflight asks the configured domain backend what the host enforces.
func hostPreflight(cfg *config.Config, log hclog.Logger) func(context.Context) (*protocol.PreflightReport, error) {
	switch cfg.Domain.Backend {
	case config.BackendLinux:
		d := &domain.Linux{LauncherPath: cfg.Domain.LauncherPath, Direct: cfg.Domain.Direct, Log: log}
		return d.Preflight
	case config.BackendUnsafeLocal:
		d := &domain.UnsafeLocal{WorkspacesRoot: cfg.Domain.WorkspacesRoot, Log: log}
		return d.Preflight
	}
	return nil
}

// databaseCheck: with an external URL, connect as the kernel role and
// check the schema (never migrating); with a managed cluster, ask the
// running kernel, which holds the cluster's secrets.
func databaseCheck(ctx context.Context, cfg *config.Config) api.Check {
	if cfg.Managed() {
		v, err := api.NewClient(cfg.APISocket()).Preflight(ctx)
		if err != nil {
			if api.IsUnreachable(err) {
				return api.Check{Name: "database", Detail: "managed cluster: no kernel answers on the API socket to report it"}
			}
			w := protocol.AsWire(err)
			return api.Check{Name: "database", Detail: string(w.Code) + ": " + w.Message}
		}
		for _, c := range v.Checks {
			if c.Name == "database" {
				return c
			}
		}
		return api.Check{Name: "database", Detail: "the kernel reported no database check"}
	}
	st, err := store.Open(ctx, store.Config{URL: cfg.Store.URL, InstanceID: "preflight", MaxConns: 1})
	if err != nil {
		w := protocol.AsWire(err)
		return api.Check{Name: "database", Detail: string(w.Code) + ": " + w.Message}
	}
	defer st.Close()
	v := api.Preflight(ctx, st, nil)
	return v.Checks[0]
}
