// Command autonomic-entry is package entry's command: the first program of
// an agent domain (see package entry for its usage and invariants).
package main

import (
	"os"

	"github.com/autonomic-kernel/autonomic/entry"
)

func main() { os.Exit(entry.Main(os.Args[1:], os.Stderr)) }
