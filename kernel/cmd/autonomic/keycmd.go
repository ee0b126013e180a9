package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// keyCmd registers and lists the policy keys of the running kernel:
// `autonomic key add ID PUBLIC_KEY` (as the kernel's account or root: a
// policy key defines what episodes may do) takes effect for the next
// policy verified, persisted, no restart; `autonomic key list` shows them.
func keyCmd(args []string, stdout, stderr io.Writer) int {
	const keyUsage = "usage: autonomic key add ID PUBLIC_KEY | key list [--json]\n"
	if len(args) == 0 || (args[0] != "add" && args[0] != "list") {
		fmt.Fprint(stderr, keyUsage)
		return 2
	}
	o := newOpFlags("key "+args[0], stderr)
	pos, err := o.parse(args[1:])
	if err != nil || (args[0] == "add") != (len(pos) == 2) {
		fmt.Fprint(stderr, keyUsage)
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, cancel := opCtx()
	defer cancel()
	if args[0] == "add" {
		if err := c.AddKey(ctx, pos[0], pos[1]); err != nil {
			return opFail(stderr, err)
		}
		fmt.Fprintf(stdout, "policy key %s registered: policies it signs verify from now on\n", pos[0])
		return 0
	}
	keys, err := c.PolicyKeys(ctx)
	if err != nil {
		return opFail(stderr, err)
	}
	if *o.json {
		printJSON(stdout, keys)
		return 0
	}
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPUBLIC KEY")
	for _, id := range ids {
		fmt.Fprintf(tw, "%s\t%s\n", id, keys[id])
	}
	tw.Flush()
	return 0
}
