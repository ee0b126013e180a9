// Package mcp serves the kernel's operator API as Model Context Protocol
// tools, so that an orchestrating agent can read what the kernel is doing
// (`autonomic mcp`: stdio, or streamable HTTP on a Unix socket the
// operator owns).
//
// Invariants:
//   - No tool grants authority. Every tool is one read of the operator API
//     through api.Client on the kernel's socket, so the kernel's own
//     peer-credential rule (api.Access) bounds an MCP caller exactly as it
//     bounds the CLI of the account that runs `autonomic mcp`: a caller the
//     API refuses gets peer_refused from every tool. There is no tool that
//     approves, signs, settles, lifts or starts anything: a human decision
//     stays with the operator's signing key and the CLI.
//   - The tool set is closed (Tools); each tool's input is a typed struct
//     whose JSON schema the SDK checks before the handler runs, and ids
//     and limits are checked again here. Every failure is a tool error
//     carrying a code from the closed catalogue (protocol.Code) and the
//     catalogue's message, never a local cause, a path or a payload.
//   - What a tool returns is what the API returns: no worker output, no
//     payload bytes, no credential beyond what the operator API shows.
package mcp
