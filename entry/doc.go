// Package entry is autonomic-entry, the first program of an agent domain:
// it writes the agent's configuration files into its HOME, opens loopback
// bridges to the domain's Unix sockets (the inference relay's), and runs
// the agent.
//
//	autonomic-entry [--home-file REL=BASE64]... [--env K=V]...
//	    [--bridge 127.0.0.1:PORT=/run/autonomic/inference.sock]... -- ARGV...
//
// It is untrusted-side code. It runs as the worker, inside the domain and
// its seccomp filter, and holds no authority: no credential, no socket the
// worker could not open itself, nothing the agent could not do on its own.
// Nothing in the kernel trusts what it does; the launcher binds the sockets
// and the relay checks every request. It exists because agent CLIs want a
// base URL on TCP, not a Unix socket.
//
// Invariants:
//   - A home file is written only beneath $HOME: its name is relative, has
//     no "." or ".." component, and no component is followed if it is a
//     symlink; the file is the worker's, mode 0600.
//   - A bridge listens on a loopback address only, and forwards each
//     connection byte for byte, both directions, to a new connection on its
//     Unix socket, respecting half-close.
//   - ARGV runs with stdin /dev/null, its environment plus the --env pairs;
//     SIGTERM and SIGINT are forwarded to it, and autonomic-entry exits with
//     its status (128+N when a signal N ended it) once it has exited.
package entry
