package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/autonomic-kernel/autonomic/seccomp/internal/floorgen"
)

func main() {
	in := flag.String("profile", "", "floor profile (JSON)")
	out := flag.String("out", "", "generated Go file")
	flag.Parse()
	if *in == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: genfloor -profile floor.json -out floor_gen.go")
		os.Exit(2)
	}
	src, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genfloor:", err)
		os.Exit(1)
	}
	gen, err := floorgen.Generate(src)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genfloor:", err)
		os.Exit(1)
	}
	// Write beside the target and rename, so a failed run never leaves the
	// launcher with a half-written floor.
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, gen, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genfloor:", err)
		os.Exit(1)
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.Remove(tmp)
		fmt.Fprintln(os.Stderr, "genfloor:", err)
		os.Exit(1)
	}
}
