// Package api is the kernel's local operator API: JSON over HTTP on one
// unix socket, and the client the `autonomic` operator commands use.
//
// Invariants:
//   - Only the kernel's own account, root, and members of the configured
//     operator group reach a handler. Two independent layers hold this:
//     the socket file is mode 0660, owned by the kernel's account and the
//     operator group; and every connection's SO_PEERCRED uid (taken by the
//     kernel at connect time, so a peer cannot forge it) is checked before
//     any request on it is served. The second layer also covers the moment
//     between bind and chmod, and a socket whose mode someone loosened.
//   - Every read is answered from the authority store in the request's own
//     transaction; the API keeps no cache and never promotes controller
//     memory to authority (a live status is labelled as the controller's
//     view, beside the store's record).
//   - Errors cross the socket only as catalogue codes (protocol.Error);
//     a Go error string, a path or a payload never does. Request bodies are
//     size-capped and strictly decoded.
//   - Nothing is logged but the method, the route pattern, the peer uid
//     and the outcome code: never a body, a payload or worker output.
package api
