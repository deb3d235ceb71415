// Package proxy is ohd's conversation API: an HTTP and WebSocket front,
// compatible with the OpenHands agent server, that provisions each
// conversation through ohd's orchestrator and forwards to the
// conversation's own "inner" agent server (in its container, published on
// 127.0.0.1:<port>; reached inside the container's network namespace when
// the orchestrator's Target carries a Dial). Serve reads every connection
// first (front.go): a forwarded GET that is plain on both sides, the hot
// path, is answered from the bytes by the lean path (lean.go: which
// requests and answers qualify, and what it does not do); at the first
// request it does not take, the connection goes to net/http's server for
// the rest of its life. There, bodiless GET and HEAD are forwarded by
// forwardBodiless over innerTransport's pooled connections on the
// handler's goroutine, other requests by httputil.ReverseProxy; the lean
// path uses the same pool, header rules and scrubbing.
//
// # Start here
//
// New builds a Server from Options (the orchestrator, the accepted session
// keys, limits); Serve serves it on a listener until its context ends;
// Handler returns the bare http.Handler. LoadOrCreateKeyFile reads or
// creates the daemon's <state-dir>/session-api-key. The orchestrator is
// reached through the narrow Conversations interface, which
// *conversation.Manager implements.
//
// # Authentication
//
// Every route needs the header X-Session-API-Key with one of the
// configured keys, except the agent server's probes GET /alive, /health and
// /ready (constant answers that say nothing about conversations), GET
// /server_info (key-less on the agent server too; serverinfo.go) and CORS
// preflights (cors.go). The key
// is compared in constant time with every configured key: SHA-256 digests
// of equal length, compared with crypto/subtle, all of them, with no early
// exit. A missing or wrong key answers
//
//	401 {"detail": "Unauthorized"}
//
// (the agent server's exact body), with a header X-Ohd-Hint saying what
// to send,
//
// before anything else happens (unknown routes answer 401 too, so a client
// without a key learns nothing about which routes or conversations exist).
//
// WebSockets (/sockets/events/{id}, /sockets/session/{id}) authenticate as
// the agent server's do (reference §7): the X-Session-API-Key header, or
// the session_api_key query parameter (deprecated in the agent server but
// kept there because browsers cannot set headers on a WebSocket; ohd
// accepts it on these routes only and never forwards it), checked before
// the upgrade: a wrong one is refused with 403 before it. When neither is
// sent, a first message {"type":"auth","session_api_key":"..."} within
// Timeouts.WSAuth (10 s); a wrong key, a wrong or missing first message,
// or the timeout close the connection with 4001 "Authentication failed".
// Later auth control frames ({"type":"auth"[,"session_api_key"]}) are
// dropped, never forwarded (the agent server ignores them; forwarding
// would hand the outer key to the container). Authentication comes before
// the conversation is looked up; then an unknown conversation (or a
// malformed id) closes with 4004 "Conversation not found" (the SDK treats
// it as fatal), and a conversation whose inner server cannot be started or
// reached, or whose connection breaks, with 1011 (the SDK retries).
//
// The workspace routes (GET /api/conversations/{id}/workspace[/{path}])
// also accept the oh_workspace_session_key cookie, which POST
// /api/auth/workspace-session sets to the request's header key (DELETE
// expires it), as the agent server does (reference §8); ohd answers that
// route itself (workspace_session.go). The cookie is never forwarded.
//
// # Routes
//
//	POST   /api/conversations                create (below); 201 with the inner server's answer
//	GET    /api/conversations/{id}           the inner server's ConversationInfo if running, else ohd's; 404
//	GET    /api/conversations?ids=A&ids=B    [info|null, ...] in the order asked; 422 without ids or with a malformed id (at most 99 ids)
//	GET    /api/conversations/count          a bare JSON integer; ?status= an execution status (422 if unknown)
//	GET    /api/conversations/search         {"items":[...],"next_page_id":string|null}; ?limit=1..100 (100), ?page_id=, ?status=, ?sort_order=CREATED_AT|CREATED_AT_DESC (default)|UPDATED_AT|UPDATED_AT_DESC
//	DELETE /api/conversations/{id}           ohd removes the conversation; {"success":true}; unknown: 400 {"detail":"Bad Request"} (as the agent server)
//	POST   /api/conversations/prepare-for-sandbox-pause  the upstream's; without one 204 (serverinfo.go)
//	GET    /server_info                      no key; the upstream's or ohd's ServerInfo, capabilities ohd serves (serverinfo.go)
//	OPTIONS (any path, a CORS preflight)     no key; answered as the agent server's CORS middleware (cors.go)
//	ANY    /api/conversations/{id}[/{tail}]  forwarded to the inner server (GET and DELETE of /{id} excepted)
//	ANY    /api/conversations/{id}/children|credential-bindings[/...]  501, saying why
//	POST   /api/conversations/{id}/fork      a new conversation from id's events up to from_event_id: its own container,
//	                                         worktree branched from id's published commit, credentials copied (fork.go)
//	POST   /api/conversations  with parent_conversation_id  plan mode's child on its folder, listed in the parent's
//	                                         sub_conversation_ids, deleted with the parent (family.go)
//	WS     /sockets/events/{id}              bridged to the inner server's /sockets/events/{id}
//	WS     /sockets/session/{id}             bridged to the inner server's v2 /sockets/session/{id} (?after_seq= passed on)
//	POST   /api/auth/workspace-session       the upstream's; without one, ohd's: 204, Set-Cookie oh_workspace_session_key (DELETE: expired)
//	POST   /api/conversations/{id}/secrets   mediated (below), then forwarded
//	POST   /api/conversations/{id}/switch_llm|switch_profile  mediated (below), then forwarded; the inner answer
//	ANY    /api/{bash,git,file,...}/...?cid=ID   the deprecated global routes: forwarded to conversation ID's inner server, cid dropped
//	ANY    /api/{file,git}/...?path=P        without cid: forwarded to the conversation whose working directory holds P (pathroute.go)
//	POST   /api/bash/{start,execute}_bash_command {"cwd": P}  the same by cwd; the polls of a command started so follow it
//	ANY    /api/{file,git,bash}/... naming no conversation  the upstream's; without one 404 saying how to name it (cid, scoped route)
//	GET    /api/file/download-trajectory/{id}  an ohd conversation's: its own server's zip of its conversation directory
//	GET    /api/vscode/url?cid=ID, /api/desktop/url?cid=ID   the inner server's answer, its URL made ohd's (ports.go)
//	GET    /api/conversations/{id}/vscode/url|status, .../desktop/url  the newer server's scoped JSON routes: url as the ?cid= form, status the inner's
//	ANY    /ohd/conversations/{id}/vscode/..., .../desktop/...  the container's VS Code (8001) and desktop (8002), HTTP and
//	                                         WebSocket, by a token in the URL or its cookie (ports.go); also under
//	                                         /api/conversations/{id}/ for containers started before the move
//	WS     /sockets/bash-events?cid=ID       the global bash socket, bridged to conversation ID's inner server's (cid dropped):
//	                                         a bad key 403 before the upgrade, a malformed cid 422, an unknown conversation 4004
//	ANY    everything else (HTTP and WebSocket)  the upstream's (below); without one, 404 naming --upstream
//
// Conversation ids are accepted in every form the agent server's UUID
// validation takes (hyphenated or not, braces, urn:uuid:, any case) and
// used in canonical lower-case form; a malformed id is FastAPI's 422
// {"detail":[{"type":"uuid_parsing","loc":["path","conversation_id"],...}]}.
// The global routers and sockets that take ?cid= are
// openhands.IsGlobalRouter and openhands.IsGlobalSocket.
//
// # The upstream
//
// Options.Upstream (ohd serve --upstream URL) is the operator's own agent
// server in local mode: every route that is not a conversation's
// (settings, profiles, skills, tools, /api/file/home,
// /api/auth/workspace-session, /sockets/bash-events, ...) passes to it,
// HTTP and WebSocket, so Agent Canvas pointed at ohd works as if pointed
// at the agent server. ohd checks the client's key first (401 as
// everywhere), then forwards the request as sent (the client's
// X-Session-API-Key included: the upstream is configured with the same
// keys, and X-Expose-Secrets, which only these routes may carry), minus
// hop-by-hop and X-Forwarded-* headers, with the client's Host; bodies
// are bounded by MaxBody (413). The answer passes byte for byte (status,
// headers minus hop-by-hop ones, Set-Cookie included, body), except that
// a URL on the upstream's address becomes relative and a redirect or
// error body is scrubbed of it. An upstream that does not answer is 502
// (504 when it does not send headers within Timeouts.ResponseHeader),
// naming it. A WebSocket authenticates as /sockets/events/{id} does and
// is bridged with the key it authenticated with in the header.
//
// # Secret mediation
//
// No credential of a create body reaches the container: before the
// create, openhands.Mediator takes each LLM key (plaintext from the SDK,
// or a Fernet token of the upstream's key, Options.UpstreamSecretKey,
// from Canvas) into an LLM profile "<id>.llm" and each other secret
// (StaticSecret values, agent_context.secrets, LookupSecrets on the
// upstream's /api/settings/secrets/<NAME>, read now with the headers
// Canvas gave) into a secret "<id>.<NAME>" of Options.Secrets, granted to
// that conversation only (CreateRequest.Grants). The inner server gets
// base_url http://127.0.0.1:8751/llm/<id>.llm with a placeholder key and
// LookupSecrets on http://127.0.0.1:8751/secrets/<id>.<NAME>: the broker
// relay ohctl inner-exec serves inside the container (broker.Relay), so
// every use goes through the broker (audited, revocable). A remote MCP
// server's credential headers (mcp_config headers and auth) become a
// broker MCP server "<id>.mcp.<server>" (URL and headers on the host, each
// header's value a secret "<id>.mcp.<server>.h<n>" that only the MCP
// proxy reads), granted as kind mcp; the inner server gets url
// http://127.0.0.1:8751/mcp/<id>.mcp.<server> and no credential. The body
// is refused with 422 naming the field when it carries what ohd cannot
// mediate (a stdio MCP server's secret environment, OAuth or SSE MCP
// servers, AWS keys, other providers, a token the upstream's key does not
// open) or one of ohd's keys anywhere.
// POST /api/conversations/{id}/secrets is mediated the same way. The
// conversation's own profiles, secrets and MCP servers are removed with
// it; those of a failed create at once.
//
// Profiles and LLM switches (profiles.go): a create's agent_profile_id is
// resolved from the upstream's stores, read with the client's key
// (openhands.Mediator.ResolveAgentProfile), into the agent_settings the
// agent server would build from it, then mediated as above; an unknown
// profile answers 404 naming the field, and nothing is created. A
// create's title_llm_profile and a switch_profile's profile_name name an
// upstream LLM profile: its key becomes broker profile
// "<id>.profile.<name>", and the LLM (relay base_url, placeholder key) is
// saved under the same name in the inner server's own profile store
// (POST /api/profiles/{name}), where the inner server looks it up; an
// unknown title profile is dropped (the server then titles with the
// agent's LLM, as it does when the profile does not load). switch_llm's
// llm (plaintext key, or a token under the upstream's key, as Canvas's
// model picker sends it) becomes broker profile "<id>.llm-<random>". A
// switch adds a profile and keeps the earlier ones granted until the
// conversation ends (the condenser's and the title's LLM, and the inner
// server's registry, which reuses an LLM by usage_id, may still use
// them). Bad input (an unknown profile 404, an unopenable token, a
// provider or credential ohd does not mediate 422) stores nothing.
//
// The API shows conversations that are running or stopped. One being
// provisioned does not exist yet for a client (its create has not
// answered); a failed or deleted one no longer does (ohctl shows both).
//
// # Metadata reads
//
// GET of one conversation, ?ids=, count and search answer from ohd's
// records, and ask the inner server of each running conversation for its
// ConversationInfo (a few at a time, each within Timeouts.Metadata;
// include_skills passed on). For a conversation that is stopped (or whose
// inner server does not answer) they read the inner server's own files on
// the host instead (Conversations.InnerInfo: meta.json and
// base_state.json, secrets redacted, the real execution_status), as the
// agent server's docker runtime does (reference §5 "Metadata reads"), and
// trim agent.agent_context.skills to [] unless include_skills is true,
// as the server does for every ConversationInfo it answers
// (openhands.TrimSkills). include_skills is read as the server reads it
// (the last value, pydantic's boolean words; anything else answers 422
// bool_parsing, also before a create provisions anything).
// They never start a stopped conversation, and do not count as activity
// for the idle timer: a client polling metadata must not keep idle
// containers alive, nor wake them. Only when there are no such files
// either does ohd render the info from its record, in the agent server's
// shape with what ohd knows, plus ohd's own view:
//
//	{"id", "workspace": {"kind": "LocalWorkspace", "working_dir"},
//	 "execution_status", "title": null, "tags": {}, "created_at", "updated_at",
//	 "ohd": {"state", "workspace", "worktree", "branch", "notes"}}
//
// The agent's configuration, stats and title live only in the inner
// server, so they are missing there. The response header X-Ohd-Source says
// which ("inner", "host" or "ohd"). The execution_status of a conversation ohd
// does not ask is "idle": a stopped conversation runs no agent step, and
// its next request starts it again. Count and search filter on the
// execution status the inner servers report, that one for the others.
//
// # Create
//
// The body is the agent server's StartConversationRequest, a JSON object
// whose every field ohd keeps as sent except three: workspace.working_dir
// is a host path (it must be absolute and exist on ohd's host);
// worktree (top level, a boolean, as in the agent server) asks for a
// worktree; conversation_id (optional) is honoured, else ohd generates
// one. ohd then calls Conversations.Create, which provisions identity,
// worktree, broker and container, and in its forward step posts the body
// to the inner server, rewritten: workspace.working_dir becomes the
// conversation's working directory (the worktree, which has the same path
// inside the container), worktree is removed (the inner server must not
// create a worktree of its own), conversation_id is set, and with a
// worktree the agent server's own worktree guidance (openhands.WorktreeGuidance)
// is appended to the agent's agent_context.system_message_suffix; in a
// folder that is not a git repository, openhands.PlainFolderGuidance
// (git is not available there) is.
// include_skills in the query is passed on (its last value). A non-2xx
// answer from the inner server fails the create, so everything is undone.
// On success the client gets the inner server's answer (201), with the
// headers X-Ohd-Conversation-Id, X-Ohd-Worktree and X-Ohd-Branch (when a
// worktree was made) and one X-Ohd-Note per note (e.g. "the workspace is
// not a git repository: started without a worktree").
//
// ohd's record keeps a secret-free copy of the request (CreateRequest.Request):
// conversation_id, workspace.working_dir, worktree, max_iterations,
// stuck_detection, tags, autotitle, title_llm_profile, and the names only
// of the other fields. The agent, its LLM settings and secrets never reach
// ohd's store.
//
// Create errors:
//
//	413  body larger than MaxBody
//	422  FastAPI's validation list: not one JSON object; workspace.working_dir missing or not a
//	     string; worktree not a boolean; conversation_id not a UUID
//	400  {"detail", "step": "validate"}: working_dir not absolute, not a directory, ...
//	200  (not an error) the conversation id exists: its info, the rest of the body ignored, as the agent server answers a retried create
//	409  {"detail", "step": "validate"}: the conversation id is still being created
//	422  parent_conversation_id names no conversation (plan mode's child needs its parent: family.go)
//	4xx/5xx  the inner server refused the create: its status and body (scrubbed of loopback
//	     addresses), plus "step": "forward" when the body is a JSON object
//	502  {"detail", "step": "forward"}: the inner server could not be reached
//	503  {"detail", "step": "image"|"container"}: the engine failed
//	500  {"detail", "step": "worktree"|"broker"|...}: any other step failed
//
// Every create error also carries the header X-Ohd-Failed-Step. None
// names a conversation id: a failed create is undone, so no conversation
// has it.
//
// # Delete
//
// DELETE runs Conversations.Remove to its end even if the client goes
// away: the container is stopped, the broker closed, uncommitted work
// snapshotted, the worktree removed and the identity revoked. The answer
// is {"success": true}, with "ohd": {"snapshot_ref", "branch", "kept",
// "ignored_files", "ignored_bytes", "message"} added when work was kept
// (kept: refs of the conversation's git view kept under
// refs/ohd/kept/<id>/) or ignored files were left out. A DELETE never
// discards work (ohctl rm --discard does).
//
// # Forwarding
//
// A forwarded request starts a stopped conversation first (Target) and
// counts as activity (Touch, also while a long response or a WebSocket
// streams). On the way in ohd removes hop-by-hop headers (Connection and
// the headers it names, Keep-Alive, Proxy-*, TE, Trailer,
// Transfer-Encoding, Upgrade), Forwarded and X-Forwarded-*, the client's
// Authorization, Cookie and X-Session-API-Key, and the query parameters
// session_api_key, x-session-api-key, x_session_api_key, authorization and
// access_token (compared case-insensitively after unescaping; the rest of
// the query is kept byte for byte); it sets X-Session-API-Key to the inner
// key and keeps the client's Host, so URLs the inner server builds name
// ohd. Requests carrying X-Expose-Secrets are refused with 422 on every
// route but the upstream's. Bodies larger than MaxBody (16 MiB) are refused with 413, also
// when chunked.
//
// On the way out, no header or redirect reveals the inner address:
// URL-bearing values on it (Location, Content-Location, Link, Refresh, any
// header) become relative, so the client resolves them against ohd; other
// mentions of it, and any loopback host:port, are replaced by
// "[conversation server]" in headers and in redirect and error bodies
// (status 300 and above, read up to 1 MiB; a body in an encoding other
// than identity or gzip is replaced by a short JSON detail). Set-Cookie
// from the inner server is dropped: ohd never sends cookies back to it.
// Streaming responses (server-sent events, chunked bodies) are flushed as
// they arrive. An unreachable inner server answers 502 {"detail": ...},
// one that does not send headers within Timeouts.ResponseHeader 504;
// neither names the address. ohd's own error messages are scrubbed of
// loopback addresses as well.
//
// # WebSockets
//
// After authentication ohd dials the inner server's
// /sockets/events/{id} with the inner key (and the client's query minus
// its credentials) and copies messages both ways, text and binary, each
// direction in its own goroutine with its own buffer. A write waits at
// most Timeouts.WSWrite: a client that stops reading is disconnected
// rather than allowed to hold anything but its own connection. A close
// from either side closes the other with the same code and reason when
// that code may be sent (else 1001 towards the inner server, 1011 towards
// the client). Clients are pinged every Timeouts.WSPing. Messages are at
// most MaxWSMessage (16 MiB; larger closes with 1009). Subprotocols and
// compression are not negotiated. An upgrade that carries an Origin
// (a browser) is accepted only from an origin CORS allows (cors.go). When
// Serve's context ends, every WebSocket is closed with 1001.
//
// # Listening
//
// Serve refuses a listener on a non-loopback address (ErrNonLoopback)
// unless Options.AllowRemote is set, which the daemon does only for keys
// the operator configured. New refuses to run without a key (ErrNoKeys):
// unlike the agent server, ohd never serves without authentication.
//
// # Metrics
//
// Options.Observer, if set, is told of every request with a route label
// (create, get, batch_get, count, search, delete, forward, events, health,
// not_found), its status and duration, and of every WebSocket
// opened and closed (with the close code sent to the client).
//
// # Caveats
//
// Browsers: CORS is answered as the agent server's
// LocalhostCORSMiddleware does (cors.go; loopback pages and
// Options.CORSOrigins). GET /api/conversations/{id}/
// workspace[/{path}] also accepts the oh_workspace_session_key cookie the
// upstream's POST /api/auth/workspace-session sets. A create whose
// working_dir does not exist has it made under Options.WorkspaceRoots or
// the upstream's home (workdir.go, package workdir).
package proxy
