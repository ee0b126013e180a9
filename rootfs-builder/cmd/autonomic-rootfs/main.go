package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	rootfs "github.com/autonomic-kernel/autonomic/rootfs-builder"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  autonomic-rootfs build --spec SPEC --dest DIR [--add SRC=DEST]... [--npm-cache DIR] [--quiet]
  autonomic-rootfs build --spec SPEC --cache DIR [--add SRC=DEST]... [--npm-cache DIR] [--quiet]
  autonomic-rootfs evict --cache DIR [--keep N] [--config FILE]... [--reference PATH]... [--dry-run]
  autonomic-rootfs verify DIR
  autonomic-rootfs digest DIR
`

// listFlags collects a repeated string flag.
type listFlags []string

func (l *listFlags) String() string { return fmt.Sprint(len(*l)) }

func (l *listFlags) Set(s string) error { *l = append(*l, s); return nil }

// addFlags collects repeated --add SRC=DEST.
type addFlags []rootfs.Add

func (a *addFlags) String() string { return fmt.Sprint(len(*a)) }

func (a *addFlags) Set(s string) error {
	v, err := rootfs.ParseAdd(s)
	if err != nil {
		return err
	}
	*a = append(*a, v)
	return nil
}

// run returns the exit status: 0 success, 1 failure or mismatch, 2 usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "build":
		return build(ctx, args[1:], stdout, stderr)
	case "evict":
		return evict(args[1:], stdout, stderr)
	case "verify", "digest":
		fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
		fs.SetOutput(stderr)
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		dir := fs.Arg(0)
		if args[0] == "verify" {
			if err := rootfs.Verify(dir); err != nil {
				fmt.Fprintf(stderr, "autonomic-rootfs: verify %s: %v\n", dir, err)
				return 1
			}
		}
		d, err := rootfs.ManifestDigest(dir)
		if err != nil {
			fmt.Fprintf(stderr, "autonomic-rootfs: %v\n", err)
			return 1
		}
		if args[0] == "verify" {
			fmt.Fprintf(stderr, "autonomic-rootfs: %s matches its manifest\n", dir)
		}
		fmt.Fprintln(stdout, d)
		return 0
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
}

func build(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	specPath := fs.String("spec", "", "spec file (JSON)")
	dest := fs.String("dest", "", "destination directory; must not exist or be empty")
	cache := fs.String("cache", "", "content-addressed rootfs cache: reuse (verified) or build DIR/NAME-KEY; prints DIGEST PATH")
	npmCache := fs.String("npm-cache", "", "npm install cache (default "+rootfs.DefaultNPMCache+")")
	quiet := fs.Bool("quiet", false, "no progress output")
	var adds addFlags
	fs.Var(&adds, "add", "SRC=DEST: copy host file SRC to rootfs path DEST (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *specPath == "" || (*dest == "") == (*cache == "") || fs.NArg() != 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	spec, err := rootfs.LoadSpec(*specPath)
	if err != nil {
		fmt.Fprintf(stderr, "autonomic-rootfs: %v\n", err)
		return 1
	}
	opts := rootfs.Options{Add: adds, Notes: stderr, NPMCache: *npmCache}
	if !*quiet {
		opts.Progress = stderr
	}
	if *cache != "" {
		dir, digest, hit, err := rootfs.BuildCached(ctx, spec, *cache, opts)
		if err != nil {
			fmt.Fprintf(stderr, "autonomic-rootfs: build failed: %v\n", err)
			return 1
		}
		if hit {
			fmt.Fprintf(stderr, "autonomic-rootfs: cached %s matches its manifest\n", dir)
		}
		fmt.Fprintln(stdout, digest, dir)
		return 0
	}
	digest, err := rootfs.Build(ctx, spec, *dest, opts)
	if err != nil {
		fmt.Fprintf(stderr, "autonomic-rootfs: build failed: %v\n", err)
		if errors.Is(err, rootfs.ErrDenied) {
			fmt.Fprintln(stderr, "autonomic-rootfs: the denylist is not configurable; remove the entry from the spec")
		}
		return 1
	}
	fmt.Fprintln(stdout, digest)
	return 0
}

// evict prints each evicted entry on standard output, and each kept one
// with why on standard error.
func evict(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("evict", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cache := fs.String("cache", "", "the rootfs cache (build --cache DIR)")
	keep := fs.Int("keep", 1, "keep this many most recently built or used entries besides the referenced ones")
	dry := fs.Bool("dry-run", false, "list what would be evicted; remove nothing")
	var configs, refs listFlags
	fs.Var(&configs, "config", "launcher configuration whose rootfses are kept (repeatable)")
	fs.Var(&refs, "reference", "a rootfs path to keep (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cache == "" || fs.NArg() != 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	res, err := rootfs.Evict(*cache, rootfs.EvictOptions{Keep: *keep, Configs: configs, Referenced: refs, DryRun: *dry})
	kept := make([]string, 0, len(res.Kept))
	for p := range res.Kept {
		kept = append(kept, p)
	}
	sort.Strings(kept)
	for _, p := range kept {
		fmt.Fprintf(stderr, "autonomic-rootfs: kept %s (%s)\n", p, res.Kept[p])
	}
	for _, p := range res.Evicted {
		fmt.Fprintln(stdout, p)
	}
	if err != nil {
		fmt.Fprintf(stderr, "autonomic-rootfs: evict: %v\n", err)
		return 1
	}
	return 0
}
