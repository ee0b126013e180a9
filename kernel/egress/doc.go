// Package egress is each episode's egress proxy: the only way bytes from
// outside reach a domain, for fetching dependencies from package
// registries. The kernel serves it on the episode's egress socket, which
// the launcher binds into the domain and autonomic-entry bridges to
// 127.0.0.1:8788; tools find it through HTTP_PROXY/HTTPS_PROXY and trust
// its CA through agent.EgressCAArgs.
//
// Invariants:
//   - Only reads leave: GET and HEAD in absolute form to port 80, and
//     CONNECT to port 443, to a host on the episode's allow list (the
//     policy's egress grant intersected with the operator's ceiling;
//     no grant, no egress). No request body, no other method, no
//     forwarded credential: a request carries upstream only Accept,
//     User-Agent and conditional headers. Everything else is refused
//     with 403 and a plain-text reason the tool prints, recorded, and
//     reported to OnRefused before anything is resolved or sent.
//   - The proxy resolves each name itself and connects to the one
//     address it checked (broker.PinAddress: public unicast only, every
//     address of the name). A plain-HTTP request is fetched upstream over
//     HTTPS with the certificate verified against the host name.
//   - Redirects are never followed: a 3xx is passed on only when its
//     Location names an allowlisted host (the tool's next request is
//     admitted on its own); any other is refused as redirect_refused.
//   - Every request, admitted or refused, is one row in the fetch ledger
//     (store.EgressFetch) without content: host, path, status, bytes and
//     body SHA-256 for plain HTTP; host, bytes both ways and duration for
//     a tunnel, written behind the response by one writer, in batches of
//     what queued meanwhile (one commit each; at most maxPendingRows
//     queued, then the handler waits; Close returns only once every row
//     is written, so the ledger is whole before the episode settles). Bytes into the domain are reserved
//     against the episode's durable cap before they are delivered (one
//     conditional upsert), so the cap holds across concurrent fetches and
//     kernel restarts; a cap reached stops the fetch and refuses the next
//     ones (limit_exceeded).
//   - Every admitted request pays RequestFloor against the byte cap before
//     anything is fetched (a HEAD, a cache hit, a refused body alike), at
//     most MaxRequests are admitted, and at most maxRefusalRows refusals
//     become ledger rows (the last says so): a flood spends the episode's
//     cap and cannot fill the shared ledger. Bytes the domain sends out
//     through tunnels are capped too (MaxUpBytes, in memory for the
//     proxy's life): the tunnel is cut when they run out.
//   - The shared cache is bounded (CacheBounds: 8 GiB, 200,000 blobs, and
//     1 GiB left free on its file system by default): no fill begins below
//     the reserve or at the entry cap, the least recently used blobs go
//     past a cap, and unfinished fills are swept at open.
//   - Only objects immutable by their registry's contract (Cacheable) are
//     cached, content-addressed, shared by every episode on the host, and
//     checked against their digest while served; a cached object is
//     still admitted, charged and recorded like any other fetch.
//   - A registry host with rules (Config.Registries: the Go module mirror
//     and checksum database by default) is held to its protocol, over
//     plain HTTP and inside terminated tunnels alike. On the Go mirror only
//     the module protocol's shapes pass, for module paths under a listed
//     code host (or, for a mirror that serves it, sent to /cached-only), so
//     the mirror never fetches from an origin the worker names; the
//     checksum database is asked only about module versions the mirror
//     served in this episode, since a lookup of any other would make it
//     fetch too.
//   - Tunnels are terminated, never relayed: the first record must be a
//     ClientHello without ECH whose SNI is the CONNECT host, answered with
//     a leaf of the proxy's own CA (P-256, its key only in memory; only
//     CACertPEM leaves the proxy). Every request inside must name that
//     host and is served by ServeHTTP in absolute form, so admission, the
//     registry rules, the cache, the caps and the ledger are the
//     plain-HTTP ones. A tunnel's own row records its raw bytes both ways;
//     its inner requests are charged on their own rows.
//
// The proxy never writes to a domain's filesystem, never holds a
// credential, and never acts on anything but its own socket and the
// upstream connections it opened.
package egress
