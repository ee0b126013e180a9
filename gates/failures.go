package gates

import "regexp"

// FailureLine matches a line of `go test -v` output that says why a test
// failed: a --- FAIL verdict, a panic, or a t.Error/t.Fatal report with its
// file:line. The gate runner keeps these ahead of a failed run's tail, and
// qc prints them for a failed gate.
var FailureLine = regexp.MustCompile(`^\s*(--- FAIL|panic: |\S+\.go:\d+: )`)
