// Package relayproof is the containment proof of issue 13 §6: a hostile
// fixture model drives the real Codex CLI (from the agents rootfs) inside a
// real domain under the agent seccomp profile, with the episode's
// inference relay (kernel/relay) on the host in front of a fixture
// upstream, and makes it attack.
//
// What it proves, for this domain shape (launcher through
// internal/testbed, relay_socket bound in, autonomic-entry's loopback
// bridge, HOME=/tmp/home):
//
//   - Nothing leaves but inference: the host's loopback TCP and UDP
//     listeners, an abstract Unix socket and a path Unix socket the host
//     listens on count zero connections; the bridge port is not reachable
//     from the host; connects and datagrams to the outside (and DNS) fail
//     and each becomes a violation frame.
//   - The credential stays with the relay: markers planted in the kernel
//     side's environment, in a world-readable host file, and the real
//     provider key appear in no environment, /proc/*/environ or cmdline,
//     readable file, tool output, or request the model saw.
//   - The relay forwards only its inference route: other methods, paths,
//     dotted and encoded traversals, absolute-form targets and a model
//     outside the policy are refused, each an inference_refused event in
//     the episode's ledger (the proof counts them there); the upstream sees only
//     POST /v1/responses, always with the server's key. An admitted call
//     carrying the worker's own headers (Authorization, Cookie,
//     OpenAI-Organization, X-Forwarded-For, one of its own) reaches the
//     upstream with none of them.
//
// The evidence is what the agent's own commands found, read back from the
// tool outputs Codex sends the model in its next request (the fixture
// records every request) and from Codex's --json stream.
//
// scripts/mutate_relay_proof.sh shows the proof can fail: with the relay's
// route check removed, the real key in the worker's environment, the
// domain sharing the host's network namespace (the bridge bound where the
// host reaches it), the agent profile letting connect through unexamined,
// a host directory as the workspace, no layer scrubbing the environment,
// the model allowlist open, or every worker header forwarded, it fails on
// the assertion the mutation targets.
//
// Not covered here: Claude Code and opencode are not attacked (they run
// the main job in TestRunLandsEachAgentsFix); the relay is started by the
// test as the controller starts it, not by autonomic serve; the domain
// has no egress socket.
//
// It runs as root only (AUTONOMIC_REQUIRE_PRIVILEGED=1 turns the skip into
// a failure) and needs PostgreSQL (the relay's budget) and the agents
// rootfs (built into /var/cache/autonomic/rootfs on first use, from npm).
// The gate real_agent_inference_relay runs it.
package relayproof
