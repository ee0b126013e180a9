// Package relay is an episode's inference relay: the only way a model call
// leaves a domain. The launcher binds the relay's Unix socket into the
// domain at /run/autonomic/inference.sock; the worker holds a placeholder
// key, and the relay forwards its calls to the configured provider with the
// key the kernel holds.
//
// Invariants:
//
//   - The credential never enters the domain. It is read by the kernel
//     (an environment variable of the kernel, or a file only the service
//     account can read), added to the upstream request after the worker's
//     own Authorization / x-api-key headers are dropped, and never written
//     into a response, an error, a log or the ledger.
//   - Only inference routes leave. A request is forwarded only when its
//     method is POST, its raw path is byte for byte one of the provider's
//     routes (so an encoded, double-encoded or dotted path can never match),
//     its body is one JSON object within the size cap with no key repeated
//     at any depth (protocol.CheckShape, one pass: about 45 ms on a 16 MiB
//     body), and its model is allowed by both the signed policy and the
//     provider. Everything else is refused with a JSON error from the
//     closed catalogue, and nothing is forwarded. A refusal is recorded in
//     the episode's ledger before it is answered (inference_refused:
//     method, raw path, model, code, status; never the body), up to 256
//     per relay so that a worker cannot load the shared store with them.
//   - The provider answers from what it is sent, and fetches nothing: a
//     body asking it to act beyond that under the kernel's key is refused
//     (403 forbidden, recorded) unless the episode's signed policy lifts
//     the rule by name (policy.InferenceLifts) — hosted_tools (server-side
//     tool types: web search and fetch, code execution, file search, MCP;
//     mcp_servers; beta headers that turn such fetches on), url_inputs
//     (images, files and documents by URL or provider file id; inline and
//     base64 content pass), stored_state (previous_response_id,
//     conversation, background). n other than 1 is always refused: the
//     budget reserves one answer (bodypolicy.go).
//   - A call's reservation bounds what it can cost. The provider is sent
//     the output cap the call was reserved for where the request named
//     none (the provider's max_output_tokens), and a streamed chat
//     completion is made to report its usage (include_usage, inserted;
//     explicitly off is refused); a stream cut after it reported its
//     input (a Messages message_start) is charged that input and the whole
//     output cap when that is more than the reservation (bound.go).
//   - An upstream error's text never reaches the worker (a gateway that
//     reflects headers would show it the key): the relay answers with the
//     provider's status, its error type and code when they are short
//     tokens, and a message of its own.
//   - A worker holds no more of the relay than its bounds: twice
//     MaxConcurrent connections (one more is closed at once), a request
//     read within ReadTimeout (a trickled body is cut), an idle kept-alive
//     connection closed after IdleTimeout. A refusal is recorded on a
//     context of its own, so a worker that hangs up still leaves it.
//   - Nothing is forwarded without a durable charge. Each call reserves a
//     pessimistic amount (the body's bytes as input tokens plus the
//     request's output cap, or the provider's ceiling, priced by the
//     provider's table) from budget the relay has already charged to the
//     episode in the store; when that pool is short the relay charges a
//     block (an eighth of the policy's limits, at least the call's need)
//     first, with the limit check in the UPDATE itself. A call settles on
//     the usage the provider reports; one that reports none keeps its whole
//     reservation, usage beyond it is charged whatever the limit, and the
//     unused pool is given back on Close. A restart keeps every charge, and
//     a kernel that dies leaves its pool charged (at most one block). A
//     call that does not fit is refused (budget_exhausted, 403: agents retry a
//     429 for minutes, a 403 ends them) and the
//     exhaustion is signalled once (Options.OnExhausted) and recorded once
//     in the episode's ledger.
//   - Streams pass through as they arrive: each chunk read from the
//     upstream is written and flushed to the worker before the next read.
//     Usage is parsed from the events as they pass; prompt and completion
//     text are never logged or stored — only digests, token counts and
//     timings.
package relay
