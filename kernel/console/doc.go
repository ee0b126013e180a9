// Package console is the kernel's web console: a read-mostly page over
// the operator API — the kernel's autonomy and faults, episodes with their
// live timelines, effects with their decisions and patches, ledger
// verification, and the Actions waiting for a human (class 4 effects, and
// those outside their lease where escalated, awaiting approval; budget
// holds) with the exact operation each names and the exact
// command that approves it.
//
// Invariants:
//   - It reads only through the operator API's client, over the kernel's
//     own socket: it shows nothing the API does not (no secret, no worker
//     output beyond the API's views), and it holds no authority — it
//     approves nothing. An approval is an Ed25519 signature over one exact
//     effect revision with the operator's key; the page shows the command
//     that makes it (autonomic action approve ACTION --key FILE --key-id
//     ID) rather than asking for the key in a browser, so the key never
//     meets a web origin, an extension or a page cache.
//   - Every request is authenticated: a bearer token, or the HttpOnly,
//     SameSite=Strict cookie a login with it sets, compared in constant
//     time with the token the kernel writes at start to
//     state_dir/console.token (0640, the kernel's account and the operator
//     group). Unauthenticated: 401 and no data.
//   - On TCP it answers only a Host that is the configured loopback
//     address (or localhost at its port): a DNS-rebinding page cannot
//     read it. Operators who want TLS put their own proxy in front.
//   - Every value from the ledger, a worker or a model is rendered by
//     html/template (escaped), and timeline rows added live are written
//     with textContent; a strict Content-Security-Policy allows only this
//     console's own script and style, no inline script and no framing.
package console
