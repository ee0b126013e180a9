// Package server composes the kernel from one validated configuration and
// runs it: the authority store (a managed cluster when no URL is set), the
// broker with its adapters, the domain backend, the episode controller and
// the operator API.
//
// Invariants:
//   - Construction runs one way, each part built from the ones before it
//     and nothing bound later: store → live regulator → governor → broker
//     → episode controller → API (compose, then Serve). The layering test
//     (internal/layering) refuses an import against that order.
//   - No work is admitted before recovery has finished — Serve
//     reconciles unsettled effects, fences and destroys stale domains and
//     resumes or contains every episode, and only then opens the API
//     socket.
//
// The caller decides who may run it; cmd/autonomic refuses root.
package server
