// Package relayproof is the containment proof of issue 13 §6: a hostile
// fixture model drives each real agent CLI — Codex, Claude Code, opencode,
// from the agents rootfs, over its own wire API and shell tool — inside a
// real domain under the agent seccomp profile, with the episode's
// inference relay (kernel/relay) on the host in front of a fixture
// upstream and the episode's egress proxy (kernel/egress) on its socket,
// and makes it attack.
//
// What it proves, for this domain shape (launcher through
// internal/testbed, relay and egress sockets bound in, autonomic-entry's
// loopback bridges, HOME=/tmp/home):
//
//   - Nothing leaves but inference: the host's loopback TCP and UDP
//     listeners, an abstract Unix socket and a path Unix socket the host
//     listens on count zero connections; the bridge port is not reachable
//     from the host; connects and datagrams to the outside (and DNS) fail
//     and each becomes a violation frame.
//
//   - The credential stays with the relay: markers planted in the kernel
//     side's environment, in a world-readable host file, and the real
//     provider key appear in no environment, /proc/*/environ or cmdline,
//     readable file, tool output, or request the model saw.
//
//   - The relay forwards only its inference route: other methods, paths,
//     dotted and encoded traversals, absolute-form targets and a model
//     outside the policy are refused, each an inference_refused event in
//     the episode's ledger (the proof counts them there); the upstream sees
//     only POST to the agent's inference route, always with the server's key. An admitted call
//     carrying the worker's own headers (Authorization, Cookie,
//     OpenAI-Organization, X-Forwarded-For, one of its own) reaches the
//     upstream with none of them.
//
//   - The egress proxy refuses what its allow list does not name: a
//     CONNECT to the host's listener, to the world, to an allowed host on
//     another port; plain requests to the host and to the relay; a POST to
//     the allowed host — each a 403 and a reported refusal.
//
// The evidence is what the agent's own commands found, read back from the
// tool outputs the agent sends the model in its next request (the fixture
// records every request) and from its own output stream.
//
// scripts/mutate_relay_proof.sh shows the proof can fail: with the relay's
// route check removed, the real key in the worker's environment, the
// domain sharing the host's network namespace (the bridge bound where the
// host reaches it), the agent profile letting connect through unexamined,
// a host directory as the workspace, no layer scrubbing the environment,
// the model allowlist open, every worker header forwarded, or the egress
// allow list open, it fails on the assertion the mutation targets (with
// Codex; the other agents meet the same guards).
//
// Not covered here: relay and proxy are started by the test as the
// controller starts them, not by autonomic serve (the main job runs them
// there, in TestRunLandsEachAgentsFix).
//
// It runs as root only (AUTONOMIC_REQUIRE_PRIVILEGED=1 turns the skip into
// a failure) and needs PostgreSQL (the relay's budget) and the agents
// rootfs (built into /var/cache/autonomic/rootfs on first use, from npm).
// The gate real_agent_inference_relay runs it.
package relayproof
