package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/config"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// DefaultSocket is where operator commands look without --socket/--config.
const DefaultSocket = "/run/autonomic/api.sock"

// opFlags are the flags every operator command takes.
type opFlags struct {
	fs     *flag.FlagSet
	socket *string
	cfg    *string
	json   *bool
}

func newOpFlags(name string, stderr io.Writer) opFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return opFlags{fs: fs,
		socket: fs.String("socket", "", "the kernel's API socket (default: api.socket of --config, else "+DefaultSocket+")"),
		cfg:    fs.String("config", "", "configuration file, to find the API socket"),
		json:   fs.Bool("json", false, "print JSON")}
}

// parse accepts flags before and after positional arguments.
func (o opFlags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := o.fs.Parse(args); err != nil {
			return nil, err
		}
		if o.fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, o.fs.Arg(0))
		args = o.fs.Args()[1:]
	}
}

func (o opFlags) client() (*api.Client, error) {
	if *o.socket != "" {
		return api.NewClient(*o.socket), nil
	}
	if *o.cfg != "" {
		c, err := config.Load(*o.cfg)
		if err != nil {
			return nil, err
		}
		return api.NewClient(c.APISocket()), nil
	}
	return api.NewClient(DefaultSocket), nil
}

func opFail(stderr io.Writer, err error) int {
	if api.IsUnreachable(err) {
		fmt.Fprintln(stderr, "autonomic: no kernel answers on the API socket (is 'autonomic serve' running, and are you in its operator group?)")
		return 1
	}
	var ce *config.Error
	if asConfigError(err, &ce) {
		fmt.Fprintf(stderr, "autonomic: %v\n", err)
		return 2
	}
	w := protocol.AsWire(err)
	if w.Code == protocol.CodeUnknownAction {
		fmt.Fprintln(stderr, "autonomic: not available: this kernel does not offer that operation")
		return 1
	}
	return fail(stderr, err)
}

func asConfigError(err error, target **config.Error) bool {
	ce, ok := err.(*config.Error)
	if ok {
		*target = ce
	}
	return ok
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

func episodeCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	o := newOpFlags("episode "+args[0], stderr)
	limit := o.fs.Int("limit", 50, "list: at most this many episodes")
	specFile := o.fs.String("spec", "", "start: the episode spec (JSON file)")
	reason := o.fs.String("reason", "", "abort, complete: why (recorded in the ledger)")
	pos, err := o.parse(args[1:])
	if err != nil {
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	switch {
	case args[0] == "list" && len(pos) == 0:
		eps, err := c.Episodes(ctx, *limit)
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, eps)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EPISODE\tSTATE\tEPOCH\tEVENTS\tOWNER\tCREATED")
		for _, e := range eps {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", e.ID, liveState(e), e.Epoch, e.LedgerSeq, e.Owner, e.CreatedAt.Local().Format(time.DateTime))
		}
		tw.Flush()
		return 0
	case args[0] == "status" && len(pos) == 1:
		e, err := c.Episode(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		printEpisode(stdout, e, *o.json)
		return 0
	case args[0] == "start" && len(pos) == 0 && *specFile != "":
		b, err := os.ReadFile(*specFile)
		if err != nil {
			fmt.Fprintf(stderr, "autonomic: --spec: %v\n", err)
			return 2
		}
		if !json.Valid(b) {
			fmt.Fprintln(stderr, "autonomic: --spec: not a JSON document")
			return 2
		}
		e, err := c.Start(ctx, b)
		if err != nil {
			return opFail(stderr, err)
		}
		printEpisode(stdout, e, *o.json)
		return 0
	case args[0] == "patch" && len(pos) == 1:
		// The episode's last git_commit effect: the harvest's, or the
		// worker's last. Its patch is printed as git applies it, landed
		// or not: a denied or ref-moved run's work is kept.
		effs, err := c.Effects(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		var last *api.EffectView
		for i := range effs {
			if effs[i].Kind == "git_commit" && (last == nil || !effs[i].CreatedAt.Before(last.CreatedAt)) {
				last = &effs[i]
			}
		}
		if last == nil {
			fmt.Fprintf(stderr, "autonomic: episode %s proposed no git_commit: it has no patch\n", pos[0])
			return 1
		}
		p, err := c.Patch(ctx, last.ID)
		if err != nil {
			return opFail(stderr, err)
		}
		b, err := base64.StdEncoding.DecodeString(p.PatchB64)
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, p)
			return 0
		}
		fmt.Fprintf(stderr, "effect %s (%s)\n", p.EffectID, p.State)
		stdout.Write(b)
		return 0
	case (args[0] == "abort" || args[0] == "complete") && len(pos) == 1 && *reason != "":
		end := c.Abort
		if args[0] == "complete" {
			end = c.Complete
		}
		e, err := end(ctx, pos[0], *reason)
		if err != nil {
			return opFail(stderr, err)
		}
		printEpisode(stdout, e, *o.json)
		return 0
	}
	fmt.Fprint(stderr, usage)
	return 2
}

func liveState(e api.EpisodeView) string {
	if e.Live != nil && e.Live.State != e.State {
		return e.State + " (" + e.Live.State + ")"
	}
	return e.State
}

func printEpisode(w io.Writer, e api.EpisodeView, asJSON bool) {
	if asJSON {
		printJSON(w, e)
		return
	}
	fmt.Fprintf(w, "episode      %s\nstate        %s\nepoch        %d\npolicy       v%d\n", e.ID, e.State, e.Epoch, e.PolicyVersion)
	if e.CurrentCheckpoint != "" {
		fmt.Fprintf(w, "checkpoint   %s\n", e.CurrentCheckpoint)
	}
	fmt.Fprintf(w, "owner        %s (until %s)\nledger       %d entries, head %s\ncreated      %s\nupdated      %s\n",
		e.Owner, e.OwnerExpiresAt.Local().Format(time.DateTime), e.LedgerSeq, short(e.LedgerHead),
		e.CreatedAt.Local().Format(time.DateTime), e.UpdatedAt.Local().Format(time.DateTime))
	if l := e.Live; l != nil {
		fmt.Fprintf(w, "controller   %s (epoch %d, generation %d, repairs %d)", l.State, l.Epoch, l.Generation, l.Repairs)
		if l.Why != "" {
			fmt.Fprintf(w, ": %s", l.Why)
		}
		fmt.Fprintln(w)
		if l.UnsafeLocal {
			fmt.Fprintln(w, "isolation    NONE: unsafe_local backend (development hosts only)")
		}
	}
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}

// effectOperator handles effect list|show (effect keygen and approve are
// in effect.go).
func effectOperator(args []string, stdout, stderr io.Writer) int {
	o := newOpFlags("effect "+args[0], stderr)
	pos, err := o.parse(args[1:])
	if err != nil || len(pos) != 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	if args[0] == "list" {
		effs, err := c.Effects(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, effs)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EFFECT\tKIND\tCLASS\tSTATE\tREV\tEPOCH\tTARGET")
		for _, e := range effs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", e.ID, e.Kind, e.Class, e.State, e.Revision, e.Epoch, e.TargetID)
		}
		tw.Flush()
		return 0
	}
	e, err := c.Effect(ctx, pos[0])
	if err != nil {
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, e)
		return 0
	}
	fmt.Fprintf(stdout, "effect       %s (revision %d)\nepisode      %s (epoch %d)\nlease        %s\nkind         %s, class %d, target %s\nstate        %s\npayload      %s\ncreated      %s\n",
		e.ID, e.Revision, e.EpisodeID, e.Epoch, e.LeaseID, e.Kind, e.Class, e.TargetID, e.State, e.PayloadDigest, e.CreatedAt.Local().Format(time.DateTime))
	if e.CommitIntentAt != nil {
		fmt.Fprintf(stdout, "commit intent %s\n", e.CommitIntentAt.Local().Format(time.DateTime))
	}
	if e.OutcomeAt != nil {
		fmt.Fprintf(stdout, "outcome      %s\n", e.OutcomeAt.Local().Format(time.DateTime))
	}
	for _, d := range e.Decisions {
		by := ""
		if d.KeyID != "" {
			by = ", key " + d.KeyID
		}
		fmt.Fprintf(stdout, "decision     %s %s (revision %d, epoch %d%s) %s\n", d.Kind, d.Verdict, d.Revision, d.Epoch, by, api.OneLine(d.Body))
	}
	return 0
}

func eventsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	o := newOpFlags("events "+args[0], stderr)
	n := o.fs.Int("n", 20, "tail: how many entries")
	follow := o.fs.Bool("follow", false, "tail: keep printing new entries until interrupted")
	pos, err := o.parse(args[1:])
	if err != nil || len(pos) != 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	switch args[0] {
	case "verify":
		ctx, cancel := opCtx()
		defer cancel()
		v, err := c.Verify(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, v)
		} else if v.OK {
			fmt.Fprintf(stdout, "ledger of %s VERIFIES: %d entries, head %d %s\n", v.EpisodeID, v.Entries, v.HeadSeq, short(v.HeadHash))
		} else {
			fmt.Fprintf(stdout, "ledger of %s is BROKEN at seq %d: %s (last good %d)\n", v.EpisodeID, *v.BrokenAt, v.Reason, v.HeadSeq)
		}
		if !v.OK {
			return 1
		}
		return 0
	case "egress":
		ctx, cancel := opCtx()
		defer cancel()
		fs, err := c.Egress(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, fs)
			return 0
		}
		for _, f := range fs {
			fmt.Fprintf(stdout, "%s  %-7s %-4s %s%s  %d  %d bytes", f.At.Local().Format(time.DateTime), f.Outcome, f.Method, f.Host, f.Path, f.Status, f.Bytes)
			if f.SHA256 != "" {
				fmt.Fprintf(stdout, "  sha256 %s", short(f.SHA256))
			}
			if f.Code != "" {
				fmt.Fprintf(stdout, "  %s: %s", f.Code, f.Reason)
			}
			fmt.Fprintln(stdout)
		}
		return 0
	case "tail":
		after := int64(-1)
		for {
			ctx, cancel := opCtx()
			es, err := c.Events(ctx, pos[0], after, *n)
			cancel()
			if err != nil {
				return opFail(stderr, err)
			}
			for _, e := range es {
				if *o.json {
					b, _ := json.Marshal(e)
					fmt.Fprintln(stdout, string(b))
				} else {
					fmt.Fprintf(stdout, "%6d  %s  epoch %-3d %-28s %s\n", e.Seq, e.At.Local().Format(time.DateTime), e.Epoch, e.Kind, api.OneLine(e.Body))
				}
				after = e.Seq
			}
			if !*follow {
				return 0
			}
			if after < 0 {
				after = 0
			}
			time.Sleep(time.Second)
		}
	}
	fmt.Fprint(stderr, usage)
	return 2
}
