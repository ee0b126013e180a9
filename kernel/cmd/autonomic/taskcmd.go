package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/episode"
	"github.com/autonomic-kernel/autonomic/store"
)

const taskUsage = `usage: autonomic task submit --spec FILE [--project P] [--priority N] [--min-class N]
       autonomic task list [--state S] [--project P] [--limit N]
       autonomic task show|cancel|events ID
       autonomic task wait ID [--timeout D]
       autonomic task budgets
`

// taskCmd is the operator's side of the durable queue every kernel of the
// database shares: submit a task (an episode spec) and leave; any kernel
// with a free slot and enough autonomy runs it, and another takes it over
// if that kernel is lost.
func taskCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, taskUsage)
		return 2
	}
	verb := args[0]
	o := newOpFlags("task "+verb, stderr)
	specFile := o.fs.String("spec", "", "submit: the episode spec (JSON file)")
	project := o.fs.String("project", "", "submit: the task's project, its cap is per project (default \"default\"); list: only this project's")
	priority := o.fs.Int("priority", 0, "submit: higher runs first (-1000..1000)")
	minClass := o.fs.Int("min-class", 0, "submit: the autonomy class the task needs (a kernel claims it only when its autonomy allows it)")
	state := o.fs.String("state", "", "list: only tasks in this state")
	limit := o.fs.Int("limit", 50, "list: at most this many")
	timeout := o.fs.Duration("timeout", time.Hour, "wait: give up after this long (the task goes on)")
	pos, err := o.parse(args[1:])
	wantID := map[string]bool{"show": true, "cancel": true, "events": true, "wait": true}
	switch {
	case err != nil, verb == "submit" && (len(pos) != 0 || *specFile == ""), (verb == "list" || verb == "budgets") && len(pos) != 0,
		verb != "submit" && verb != "list" && verb != "budgets" && (!wantID[verb] || len(pos) != 1):
		fmt.Fprint(stderr, taskUsage)
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	var t api.TaskView
	switch verb {
	case "submit":
		b, err := os.ReadFile(*specFile)
		if err != nil {
			fmt.Fprintf(stderr, "autonomic: --spec: %v\n", err)
			return 2
		}
		if !json.Valid(b) {
			fmt.Fprintln(stderr, "autonomic: --spec: not a JSON document")
			return 2
		}
		if *project == "" {
			*project = "default"
		}
		t, err = c.SubmitTask(ctx, api.TaskRequest{Project: *project, Priority: *priority, MinClass: *minClass, Spec: b})
		if err != nil {
			return opFail(stderr, err)
		}
	case "list":
		list, err := c.Tasks(ctx, *state, *project, *limit)
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, list)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TASK\tSTATE\tPROJECT\tPRIORITY\tEPISODE\tATTEMPTS\tTAKEOVERS\tCREATED")
		for _, t := range list {
			ep := "-"
			if t.EpisodeID != nil {
				ep = t.EpisodeID.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", t.ID, t.State, t.Project, t.Priority, ep, t.Attempts, t.Takeovers,
				t.CreatedAt.Local().Format(time.DateTime))
		}
		tw.Flush()
		return 0
	case "budgets":
		bs, err := c.Budgets(ctx)
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, bs)
			return 0
		}
		cap := func(v *int64) string {
			if v == nil {
				return "-"
			}
			return strconv.FormatInt(*v, 10)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROJECT\tRESOURCE\tCAP\tEMERGENCY\tRESERVED\tSPENT\tEXHAUSTED")
		for _, b := range bs {
			ex := "-"
			if b.ExhaustedAt != nil {
				ex = b.ExhaustedAt.Local().Format(time.DateTime)
			}
			fmt.Fprintf(tw, "%s\tspend µUSD\t%s\t%d\t%d\t%d\t%s\n", b.Project, cap(b.MaxSpend), b.Emergency.SpendMicroUSD, b.Reserved.SpendMicroUSD, b.Spent.SpendMicroUSD, ex)
			fmt.Fprintf(tw, "\ttokens\t%s\t%d\t%d\t%d\t\n", cap(b.MaxTokens), b.Emergency.Tokens, b.Reserved.Tokens, b.Spent.Tokens)
			fmt.Fprintf(tw, "\twall ms\t%s\t%d\t%d\t%d\t\n", cap(b.MaxWallMS), b.Emergency.WallMS, b.Reserved.WallMS, b.Spent.WallMS)
			fmt.Fprintf(tw, "\tegress bytes\t%s\t%d\t%d\t%d\t\n", cap(b.MaxEgress), b.Emergency.EgressBytes, b.Reserved.EgressBytes, b.Spent.EgressBytes)
		}
		tw.Flush()
		return 0
	case "show":
		t, err = c.Task(ctx, pos[0])
	case "cancel":
		t, err = c.CancelTask(ctx, pos[0])
	case "events":
		l, err := c.TaskEvents(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, l)
		} else {
			for _, e := range l.Events {
				fmt.Fprintf(stdout, "%s  %-4d %s %s\n", e.At.Local().Format(time.TimeOnly), e.Seq, e.Kind, e.Body)
			}
			if l.Verified {
				fmt.Fprintf(stdout, "ledger verified: %d events\n", len(l.Events))
			} else {
				fmt.Fprintf(stdout, "LEDGER BROKEN: %s\n", l.Broken)
			}
		}
		if !l.Verified {
			return 1
		}
		return 0
	case "wait":
		wctx, wcancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer wcancel()
		wctx, wcancel2 := context.WithTimeout(wctx, *timeout)
		defer wcancel2()
		t, err = c.WaitTask(wctx, pos[0], 500*time.Millisecond)
		if err != nil && wctx.Err() != nil {
			fmt.Fprintf(stderr, "autonomic: stopped waiting for task %s (%v); it goes on\n", pos[0], err)
			return 1
		}
	}
	if err != nil {
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, t)
	} else {
		printTask(stdout, t)
	}
	if verb == "wait" {
		return taskExit(t)
	}
	return 0
}

// printTask prints a task and, once final, how it ended.
func printTask(w io.Writer, t api.TaskView) {
	fmt.Fprintf(w, "task %s: %s (project %s, priority %d, attempts %d, takeovers %d)\n", t.ID, t.State, t.Project, t.Priority, t.Attempts, t.Takeovers)
	if t.Claim != nil {
		fmt.Fprintf(w, "held by %s (claim %d, until %s)\n", t.Claim.Instance, t.Claim.Token, t.Claim.ExpiresAt.Local().Format(time.TimeOnly))
	}
	if len(t.Episodes) > 0 {
		eps := make([]string, len(t.Episodes))
		for i, e := range t.Episodes {
			eps[i] = e.String()
		}
		fmt.Fprintf(w, "episodes: %s\n", strings.Join(eps, ", "))
	}
	fmt.Fprintf(w, "reserves %d µUSD, %d tokens, %s wall time, %d egress bytes; spent %d µUSD, %d tokens, %s, %d egress bytes\n",
		t.Reserve.SpendMicroUSD, t.Reserve.Tokens, time.Duration(t.Reserve.WallMS)*time.Millisecond, t.Reserve.EgressBytes,
		t.Spent.SpendMicroUSD, t.Spent.Tokens, time.Duration(t.Spent.WallMS)*time.Millisecond, t.Spent.EgressBytes)
	if t.Blocked != "" {
		fmt.Fprintf(w, "held back: %s\n", t.Blocked)
	}
	if t.CancelRequested && !t.State.Done() {
		fmt.Fprintln(w, "cancel requested: its kernel aborts the episode")
	}
	if !t.State.Done() {
		return
	}
	switch o := t.Ended; {
	case o != nil && o.Kind == episode.OutcomeLanded:
		fmt.Fprintf(w, "landed: %s at %s (effect %s)\n", o.Ref, o.Commit, o.Effect)
	case o != nil:
		fmt.Fprintf(w, "ended %s, nothing landed: %s %s %s\n", t.Outcome, o.Kind, o.Code, o.Reason)
	default:
		fmt.Fprintf(w, "ended %s %s: %s\n", t.State, t.Outcome, t.Reason)
	}
}

// taskExit: only a task whose change landed (or whose episode completed
// without a harvest) is success.
func taskExit(t api.TaskView) int {
	if t.State == store.TaskEnded && t.Outcome == string(store.EpisodeCompleted) && (t.Ended == nil || t.Ended.Kind == episode.OutcomeLanded) {
		return 0
	}
	return 1
}
