// Package sensor is the semantic sensor array: the SemanticSensor
// interface, the fixed versioned bank of five sensors (scope_drift,
// authority_escalation, evidence_sufficiency, irreversibility,
// trajectory_regime), the bounded sensor queue, and two implementations —
// deterministic rules over the diff, paths and history (Rules), and a
// client for any OpenAI-compatible chat-completions endpoint (Client).
//
// Invariants:
//   - Every failure is degradation, never "safe". The zero Level is
//     Degraded, so an observation nobody filled in is never benign; an
//     outage, a timeout, a model outside the pinned set, an over-budget
//     request, a malformed, refused or unknown answer all yield a Reading
//     whose every observation is Degraded, with the cause recorded.
//   - Semantic observations are evidence, never authority. Their signals
//     carry authority.SourceSemantic, which authority.Decide lets narrow,
//     yield or preempt, but never grant, revoke or widen; a hostile model
//     rating everything benign changes nothing a deterministic check
//     decided.
//   - Every observation carries the identity of what produced it
//     (implementation, model, schema version), so a stored observation can
//     be traced to the model that made it.
//   - Evidence leaves the kernel redacted and bounded: secret-shaped
//     strings (API keys, PEM blocks, AWS keys, bearer tokens, URL
//     credentials …) are replaced before any byte bound is applied, each
//     field is bounded, and the exact serialised request is checked against
//     its byte budget before it is sent.
//   - The sensor queue is bounded; critical deterministic frames are never
//     dropped to make room (semantic frames are, and every drop is
//     counted). If the queue is full of critical frames, PushCritical says
//     so and the caller contains.
//   - The rules read only what the kernel saw happen: the history is the
//     episode's own events (edits with their sizes, verification results,
//     violations, refusals, repairs), so every rule can rise to high from a
//     real episode, and none is constant.
//
// Nothing here logs: evidence, prompts and answers are payloads.
package sensor
