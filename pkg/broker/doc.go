// Package broker is ohd's credential broker: one Unix socket per
// conversation, through which the conversation's container gets the
// secrets, git credentials, LLM access, MCP servers and OAuth tokens it
// was granted, and nothing else. Values never travel in environment variables, log lines,
// audit records or error messages.
//
// # Basics
//
// The daemon creates one [Broker] ([New]) with a key derived from its
// master key ([DeriveKey]) and a [Backend] on its store, then calls
// [Broker.Open] for every live conversation. Open lays out
//
//	<RuntimeDir>/conversations/          0711 ohd
//	<RuntimeDir>/conversations/<id>/     0700 uid:gid   bind-mounted read-only at /run/ohd
//	    broker.sock                      0600 uid:gid
//	    token                            0400 uid:gid
//
// and serves the socket. The container mounts the directory, not the
// socket: after an ohd restart, Open on a new Broker replaces the socket
// inside the same directory (same inode), so the container sees the new
// one, and the token it holds still works. [Broker.WriteToken] rotates the
// token, [Broker.Close] ends a conversation (and removes its directory),
// [Broker.Shutdown] stops everything and keeps the directories for the
// next ohd.
//
// Inside the container, [Client] talks to the socket (it needs no DNS, no
// /etc and no cgo), [GitCredentialHelper] is git's credential helper
// (ohctl git-credential get|store|erase), and [Relay] is the broker as
// plain HTTP on the container's loopback ([RelayAddr], served by ohctl
// inner-exec) for the inner agent server's LLM base_url and
// LookupSecrets. Both find the socket and the
// token through OHD_BROKER_SOCKET and OHD_BROKER_TOKEN_FILE, defaulting to
// /run/ohd/broker.sock and /run/ohd/token.
//
// # The token
//
//	ohd1.<conversation-id>.<epoch>.<mac>
//	mac = base64url-without-padding(HMAC-SHA256(broker key, "ohd-broker-v1|<id>|<epoch>"))
//
// The id is 1-128 characters of [A-Za-z0-9_-] starting with a letter or
// digit ([ValidID]); the epoch is canonical decimal (no sign, no leading
// zero); the MAC is exactly 43 characters of the URL-safe alphabet in
// canonical form. Anything else does not parse ([ParseToken],
// [ErrInvalidToken]). It is sent as "Authorization: Bearer <token>".
//
// The broker key is HKDF-SHA256 of the master key with an empty salt and
// the info "ohd broker key v1", 32 bytes ([DeriveKey]). Tokens depend only
// on key, id and epoch, so they survive restarts; rotating or revoking is
// bumping the epoch in the store (Backend.Conversation returns the new
// one, so the old token stops working at once) and then writing the new
// token file.
//
// # The checks
//
// Every request goes through these checks in this order; the first that
// fails answers, and every request, served or not, ends in exactly one
// [AuditRecord] (time, conversation, route, kind, name, peer pid and uid,
// allowed, status, code and a precise reason; never a value):
//
//	check                                        status code             audit reason
//	connections of the conversation (at accept)  429    rate_limited     connections (then closed)
//	in-flight requests of the route's kind       429    rate_limited     in_flight (Retry-After: 1)
//	token bucket of the conversation             429    rate_limited     rate (Retry-After: seconds to the next token)
//	audit records cannot be made durable         503    audit_unavailable audit_unavailable (Retry-After: 1)
//	Origin or Sec-Fetch-Site header present      401    unauthenticated  browser_origin
//	X-OHD-Request: 1 missing or another value    401    unauthenticated  missing_request_header
//	peer credentials unreadable                  401    unauthenticated  no_peer_credentials
//	conversation unknown or ended (Backend)      401    unauthenticated  conversation_ended
//	peer uid neither the conversation's nor 0    401    unauthenticated  peer_uid
//	no Authorization header                      401    unauthenticated  no_token
//	not "Bearer <token>", or token malformed     401    unauthenticated  malformed_token
//	token of another conversation                401    unauthenticated  wrong_conversation
//	token of another epoch                       401    unauthenticated  stale_epoch
//	MAC does not match (constant time)           401    unauthenticated  bad_mac
//	no such route                                404    not_found        no_route
//	wrong method for the route                   405    bad_request      method
//	name not granted, or it does not exist       403    not_granted      not_granted / not_found
//	malformed request (git, proxy path)          400    bad_request      bad_request / bad_path / upgrade
//	request body over the limit                  413    too_large        too_large
//	the Backend failed                           500    internal         backend_error
//	LLM provider or OAuth endpoint failed        502    bad_gateway      upstream_error / refresh_failed / ...
//
// The three token failures that could help an attacker tell a live epoch
// from a forged MAC answer the same message ("invalid or revoked token");
// the audit record tells them apart. A name that exists but is not granted
// and a name that does not exist (granted or not) answer byte for byte the
// same 403 not_granted: a conversation cannot probe which names exist. An
// LLM profile whose key may not be disclosed answers GET /v1/llm/{profile}
// the same way. Error bodies are {"error": "...", "code": "..."}, but on
// the git route (text/plain "ohd: ...", for git to show).
//
// Peer credentials are read once per connection (SO_PEERCRED, see package
// peercred) and kept on the request context. The expected MAC is computed
// once per (conversation, epoch).
//
// # Routes
//
//	GET  /v1/whoami                      {"id","epoch","uid","gid","grants":{"secrets":[],"git":[],"llm":[],"oauth":[],"mcp":[]}}
//	GET  /v1/secrets                     {"names":[...]}  the granted names
//	GET  /v1/secrets/{name}              {"name","value"}; a value that is not UTF-8 comes as base64 with "encoding":"base64"
//	POST /v1/git-credential?action=get   git's credential protocol in and out: "username=...\npassword=...\n"
//	POST /v1/git-credential?action=store|erase   checked, audited, answered 200 with an empty body; nothing changes
//	GET  /v1/llm/{profile}               {"name","model","base_url","api_key"} only if the profile allows disclosure
//	ANY  /v1/llm/{profile}/proxy/{path}  forwarded to the profile's base URL + path, the key injected
//	GET  /v1/oauth/{server}/token        {"access_token","expires_at","token_type"} (expires_at omitted if unknown)
//	ANY  /v1/mcp/{server}/proxy          forwarded to exactly the MCP server's URL (query joined), its headers injected
//	ANY  /v1/git/{host}/{path...}        git smart-HTTP forwarded to the granted host, the credential injected (gitrelay.go)
//	GET  /v1/egress/{host:port}          Upgrade: ohd-egress; 101, then a byte stream to the destination (egress.go)
//	GET  /v1/egress-proxy                Upgrade: ohd-egress-proxy; 101, then the relay passes a proxy client's connection (handoff.go)
//
// Egress. A container's way out (DESIGN §5): the relay hands each
// connection whose first request is a proxy request (CONNECT or
// absolute-form) over to the broker, passing its descriptor on the socket
// (relayproxy.go, handoff.go), and the broker serves the forward proxy on
// it (forwardproxy.go): each destination is an egress connection, as one
// of GET /v1/egress/{dest} (Client.Egress) is. The broker lets it
// through only if a net grant of the conversation or
// Options.EgressAllow names the destination and egress.Policy accepts the
// address it resolves to; it dials that address itself, answers 101 and
// copies bytes both ways unread. A refusal is 403 not_granted whose
// message names the grant command, the audit reason the policy's
// (not_granted, loopback, private, metadata, host_address, ...). Each
// connection is one audit record, written when it ends, with the address
// dialled, the bytes each way and the duration. Limits.EgressConns caps
// the connections open at once and Limits.EgressRate/EgressBurst the rate
// of new ones, per conversation.
//
// Git credentials. The request body is parsed strictly
// ([ParseGitCredential]): NUL or CR anywhere, a line without "=", a bad
// or repeated key, data after the blank line, a missing or empty host, a
// protocol other than https or http, or "." and ".." path segments are
// refused with 400. Keys the broker does not know are ignored, as git asks
// of helpers. A Git grant is a host ("github.com", matched without regard
// to case, port included) or a host and a path prefix ("github.com/acme"),
// which matches that path and paths below it on a segment boundary
// ("acme/widgets" but not "acme-corp"), a trailing ".git" ignored. Path
// grants only match when git sends the path: set credential.useHttpPath=
// true in the container. store and erase change nothing: operators own
// credentials, on the host.
//
// Git without the token inside (DESIGN §5, gitrelay.go). Inside the
// container git's URLs for a granted host are rewritten to the relay
// (ANY /git/{host}/{path...}, see [GitRelayConfig]), which forwards to
// /v1/git/{host}/{path...}. The broker accepts only git's smart-HTTP
// endpoints (GET .../info/refs?service=git-upload-pack|git-receive-pack,
// POST .../git-upload-pack, POST .../git-receive-pack), paths without
// ".", "..", empty or percent-encoded segments, under a granted host or
// path prefix; it forwards to the host's scheme (https unless configured
// http for a loopback test server) with "Authorization: Basic" of the
// host's username and token (or "Bearer <token>", [GitCredential].Bearer),
// the caller's Authorization dropped, streaming both ways (no body limit:
// nothing is buffered), the token masked in answers. A 3xx answer is
// refused with 502 reason "redirect" (never followed, so the credential
// reaches the granted host only); a 401 with 502 "upstream_unauthorized"
// (passed on, git would ask its credential helper for the relay's
// address). Before a push's pack is forwarded, its command list is read
// ([gitproto.ReadCommandList], at most [MaxCommandList] bytes, 413
// beyond; a gzip body is decoded first) and the push policy applied
// (pushpolicy.go): deleting a ref and moving an existing tag are never
// allowed; by default a conversation may create and update
// refs/heads/openhands/<its id> and the refs below it, create a branch
// under [OpenHandsBranches] that does not exist (unless it is named for
// another conversation's id), and update the branches it created; a
// ref matching one of the matching grants' [GitOptions].Push patterns
// may be created or updated whoever made it. Which conversation created
// a branch is the Backend's record (RecordGitBranches, per host and
// repository path), written only for creations the host's report-status
// ([gitproto.ReadReport], read as the answer streams to git) says "ok":
// a creation the host refused (the branch exists, a hook declined)
// grants nothing. A push with any refused ref is refused whole,
// answered 200 with git's report-status (side-band when negotiated):
// "ng <ref> <reason>" for every ref, so git prints "! [remote rejected]
// ..."; the audit record has reason "push_not_granted" and Detail naming
// the refs asked, allowed and refused (and, for a push that went
// through, " created=" the branches recorded as the conversation's).
// Every refusal on the git route is answered text/plain, "ohd: <message>"
// (not JSON): git prints such a body as "remote: ohd: ..." lines, so the
// agent reads why a repository outside its grants answered 403.
// git-credential get answers no password for a host whose matching
// grants are all relayed; [GitOptions].Helper grants (--git-relay=false)
// get it as before.
//
// The LLM proxy drops the caller's Authorization, X-Api-Key, Api-Key,
// X-Goog-Api-Key, Cookie and the profile's own header, hop-by-hop headers
// and those named in Connection; asks the provider for an unencoded answer
// (an encoded one is refused with 502, since it could not be inspected);
// injects the key ("Authorization: Bearer <key>", or the bare key in the
// profile's AuthHeader); and never follows redirects (a 3xx goes back to
// the caller). The answer is streamed: every read from the provider is
// written and flushed at once, so server-sent events arrive as they are
// produced. Every occurrence of the key in the answer's headers, body and
// trailers is replaced by as many '*' (Content-Length stays right); across
// reads the broker holds back only a tail that could be the start of the
// key. Errors and logs never contain the key.
//
// MCP servers. A remote MCP server (streamable HTTP) is a URL and
// credential headers, both on the host ([MCPServer]); the container names
// the server only. The MCP proxy forwards like the LLM proxy (the same
// dropped headers, unencoded answers, no redirects, streamed answers for
// the standing SSE stream) to exactly the server's URL, query joined (the
// transport has one endpoint, so a path after "proxy" is refused with
// bad_path and the credential reaches nothing else of that host), and
// replaces any header of the caller's of the same names by the server's.
// The credential of each header (what follows an auth scheme such as
// "Bearer ", else the whole value) is masked in the answer. Keys that
// overlap each other may be masked in part only where a read boundary
// falls inside one.
//
// OAuth. An access token good for at least another minute is handed out
// as stored. Otherwise the broker refreshes it at the server's token URL
// (grant_type=refresh_token, client_id and client_secret in the form
// body), once for all concurrent callers of that server, saves the new
// access token and the (possibly rotated) refresh token through the
// Backend, and answers the access token. The refresh token never leaves
// the host.
//
// # Limits
//
// Per conversation (see [Limits]; every field configurable): request
// bodies 64 KiB (32 MiB towards an LLM provider or MCP server); requests in flight in
// separate budgets per kind (git 8, secret 8, LLM 32, OAuth 8, MCP 16,
// routes of no kind 8), so open LLM or MCP streams or callers waiting on a
// hung OAuth token endpoint never starve git; 128 open connections, idle
// keep-alive ones included ([DefaultMaxConns]: the budgets' sum and headroom; the next is
// answered 429 and closed, audit reason "connections"); a token bucket of
// 50 requests per second with a burst of 100, and a 5s header read
// timeout after which a client trickling its headers is cut off. Each
// conversation has its own socket, server, bucket and in-flight counts,
// so one busy conversation cannot starve another.
//
// # What the Backend must do
//
// Conversation is called on every request: answer it from memory (a cache
// kept in step with the store). The other lookups are called once per
// request of their route. Audit must not block: hand the record to a
// goroutine that writes batches. After SaveOAuthTokens returns, OAuthServer
// must return the saved tokens (the broker re-reads the server before
// refreshing, so that a refresh that just finished is not repeated with a
// spent refresh token).
//
// # Caveats
//
//   - SO_PEERCRED records the credentials of the process that connected.
//     A process of the conversation's uid can pass its connection to
//     another process; the broker serves whoever holds the connection.
//   - Across user namespaces the kernel maps the peer's uid into ohd's
//     namespace: a container with user-namespace remapping must be given a
//     conversation uid as ohd sees it.
//   - The proxy masks exact occurrences of the key. A provider that sends
//     the key transformed (base64, JSON-escaped, split by encoding) is not
//     caught; Content-Encoding is refused for that reason.
//   - git credential get hands the password to the container for grants
//     served through the credential helper (--git-relay=false): that is
//     what git needs then. Grant hosts (and path prefixes) narrowly; prefer
//     tokens scoped to what the conversation needs.
//   - The push policy sees ref names and old and new ids, not history: a
//     force push to a branch the conversation may update is allowed; one
//     to another conversation's branch is refused on ownership.
//   - Ownership is recorded per repository path as the relay was asked
//     for it: a host that serves one repository under two paths
//     (GitHub's "acme/w" and "acme/w.git", or another case) shows a
//     conversation's branch as not its own under the other spelling
//     (refused, never wider). A branch deleted on the host behind the
//     relay's back and made again keeps its recorded creator.
//   - A socket path is at most 107 bytes: keep RuntimeDir short.
//   - An ohd that does not run as root can only serve conversations of
//     its own uid (it cannot chown to another).
//   - On macOS the peer's gid is the first group of LOCAL_PEERCRED.
package broker
