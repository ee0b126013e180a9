package main

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/autonomic-kernel/autonomic/broker"
	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/kernel/policy"
	"github.com/autonomic-kernel/autonomic/protocol"
	"github.com/autonomic-kernel/autonomic/store"
)

const actionUsage = `usage: autonomic action list [--all] [--episode ID] | show ID
       autonomic action approve|deny ID --key FILE --key-id ID   (an effect's: signed with your decision key)
       autonomic action approve|deny ID                          (a task's budget: the emergency reserve, or cancel)
       autonomic action snooze ID --for DURATION
       autonomic action dismiss ID --feedback ` + "dont_ask_again|wrong_call|need_more_info|no_longer_relevant" + `
`

// actionCmd is the operator's side of the durable Actions: the decisions
// the kernel waits on, each bound to one exact operation. approve and deny
// sign exactly the operation the Action names (not whatever the effect
// holds by then): the kernel refuses the answer if the effect has moved.
func actionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, actionUsage)
		return 2
	}
	verb := args[0]
	o := newOpFlags("action "+verb, stderr)
	all := o.fs.Bool("all", false, "list: every Action, answered ones too")
	episode := o.fs.String("episode", "", "list: one episode's")
	keyFile := o.fs.String("key", "", "approve|deny: your Ed25519 decision key (PKCS#8 PEM)")
	keyID := o.fs.String("key-id", "", "approve|deny: the key's id in decision_keys")
	snooze := o.fs.Duration("for", 0, "snooze: how long (1s..720h)")
	feedback := o.fs.String("feedback", "", "dismiss: why ("+strings.Join(store.DismissalFeedback, ", ")+")")
	pos, err := o.parse(args[1:])
	wantID := map[string]bool{"show": true, "approve": true, "deny": true, "snooze": true, "dismiss": true}
	switch {
	case err != nil, verb == "list" && len(pos) != 0, verb != "list" && (!wantID[verb] || len(pos) != 1),
		(verb == "approve" || verb == "deny") && (*keyFile == "") != (*keyID == ""),
		verb == "snooze" && *snooze <= 0, verb == "dismiss" && *feedback == "":
		fmt.Fprint(stderr, actionUsage)
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	var out api.Action
	switch verb {
	case "list":
		list, err := c.Actions(ctx, *episode, *all)
		if err != nil {
			return opFail(stderr, err)
		}
		if *o.json {
			printJSON(stdout, list)
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ACTION\tSTATE\tPRIORITY\tOPERATION\tEPISODE\tREASON")
		for _, a := range list {
			if a.Task != nil {
				fmt.Fprintf(tw, "%s\t%s\t%d\ttask %s may use project %s's emergency reserve\t-\t%s\n", a.ID, a.State, a.Priority,
					a.Task.ID, a.Task.Project, a.Reason)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s on %s, effect %s rev %d\t%s\t%s\n", a.ID, a.State, a.Priority, a.Effect.Kind, a.Effect.TargetID,
				a.Effect.ID, a.Revision, a.Episode.ID, a.Reason)
		}
		tw.Flush()
		return 0
	case "show":
		out, err = c.Action(ctx, pos[0])
	case "approve", "deny":
		out, err = c.Action(ctx, pos[0])
		if err != nil {
			return opFail(stderr, err)
		}
		if out.Task != nil {
			// A budget Action: the operator's answer, by uid; no
			// irreversible effect is signed here.
			if out, err = c.ResolveAction(ctx, pos[0], verb == "approve"); err != nil {
				return opFail(stderr, err)
			}
			break
		}
		if *keyFile == "" {
			fmt.Fprint(stderr, actionUsage)
			return 2
		}
		key, kerr := policy.LoadPrivateKey(*keyFile)
		if kerr != nil {
			fmt.Fprintln(stderr, "autonomic: key:", kerr)
			return 1
		}
		decision := store.VerdictAllow
		if verb == "deny" {
			decision = store.VerdictDeny
		}
		// Exactly what the Action names.
		doc := protocol.ApprovalDocument{EffectID: out.Effect.ID, EffectRevision: out.Revision, EpisodeID: out.Episode.ID,
			Epoch: out.Epoch, PayloadDigest: out.Digest, Decision: decision}
		a, serr := broker.SignApproval(key, *keyID, doc)
		if serr == nil {
			serr = a.Validate()
		}
		if serr != nil {
			return fail(stderr, serr)
		}
		if _, err := c.Approve(ctx, out.Effect.ID, a); err != nil {
			return opFail(stderr, err)
		}
		out, err = c.Action(ctx, pos[0])
	case "snooze":
		out, err = c.SnoozeAction(ctx, pos[0], *snooze)
	case "dismiss":
		out, err = c.DismissAction(ctx, pos[0], *feedback)
	}
	if err != nil {
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, out)
		return 0
	}
	if out.Task != nil {
		fmt.Fprintf(stdout, "action %s: %s — task %s (spec %s) may use project %s's emergency reserve once\n", out.ID, out.State,
			out.Task.ID, out.Digest, out.Task.Project)
	} else {
		fmt.Fprintf(stdout, "action %s: %s — %s on %s, effect %s revision %d (epoch %d, payload %s), episode %s\n",
			out.ID, out.State, out.Effect.Kind, out.Effect.TargetID, out.Effect.ID, out.Revision, out.Epoch, out.Digest, out.Episode.ID)
	}
	if out.SnoozedUntil != nil {
		fmt.Fprintf(stdout, "snoozed until %s\n", out.SnoozedUntil.Format(time.RFC3339))
	}
	if verb == "show" {
		var patch []byte
		if out.Effect.Kind == "git_commit" {
			// The exact change the Action names; its paths only.
			if p, err := c.Patch(ctx, out.Effect.ID); err == nil {
				patch, _ = base64.StdEncoding.DecodeString(p.PatchB64)
			}
		}
		printEvidence(stdout, out, patch)
	}
	if out.Command != "" && verb == "show" {
		fmt.Fprintf(stdout, "approve: %s\n", out.Command)
	}
	return 0
}

// printEvidence prints why the Action was opened and the decisions
// recorded on the revision it names: verification, and the semantic
// bank's verdict with what the lease refused and each reading above low.
// Every text is quoted (strconv.QuoteToASCII): a reason may carry what a
// worker chose, and no control character reaches the terminal.
func printEvidence(w io.Writer, a api.Action, patch []byte) {
	q := strconv.QuoteToASCII
	fmt.Fprintf(w, "why: %s\n", q(a.Reason))
	for _, d := range a.Evidence {
		var b struct {
			Reason      string `json:"reason"`
			Rule        string `json:"rule"`
			Decider     string `json:"decider"`
			LeaseDenied string `json:"lease_denied"`
			Readings    []struct {
				Observations []map[string]string `json:"observations"`
			} `json:"readings"`
		}
		_ = json.Unmarshal(d.Body, &b)
		switch d.Kind {
		case store.DecisionSemantic:
			fmt.Fprintf(w, "semantic: %s (decided by %s)", d.Verdict, q(b.Decider))
			if b.LeaseDenied != "" {
				fmt.Fprintf(w, ", the lease refused %s", q(b.LeaseDenied))
			}
			fmt.Fprintln(w)
			for _, r := range b.Readings {
				for _, o := range r.Observations {
					if o["level"] != "low" {
						fmt.Fprintf(w, "  sensor %s: %s, %s\n", q(o["sensor"]), q(o["level"]), q(o["reason"]))
					}
				}
			}
		default:
			fmt.Fprintf(w, "%s: %s %s\n", d.Kind, d.Verdict, q(cmp.Or(b.Reason, b.Rule)))
		}
	}
	if a.Effect.Kind != "git_commit" {
		return
	}
	if patch == nil {
		fmt.Fprintln(w, "the change: its patch is no longer stored")
		return
	}
	var files []string
	for _, line := range strings.Split(string(patch), "\n") {
		if path, ok := strings.CutPrefix(line, "diff --git "); ok {
			files = append(files, path)
		}
	}
	fmt.Fprintf(w, "the change: %d bytes of patch, %d files (autonomic episode patch %s prints it)\n", len(patch), len(files), a.Episode.ID)
	for i, f := range files {
		if i == maxEvidencePaths {
			fmt.Fprintf(w, "  and %d more\n", len(files)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", q(f))
	}
}

// maxEvidencePaths bounds the paths action show lists.
const maxEvidencePaths = 50
