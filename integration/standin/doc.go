// Command standin stands in for the OpenHands "inner" agent server inside a
// conversation container, so ohd's runtime, proxy and end-to-end tests can
// run a real container without the real (Python, multi-gigabyte) agent
// server. It is built statically (CGO_ENABLED=0) into the test image
// ohd-test-agent:dev by internal/testimage, as /usr/local/bin/standin.
//
// It speaks the parts of the agent server's API that ohd touches, with the
// same shapes and status codes, and adds a few test-only routes (echo,
// redirect, slow, stream, exec, standin/secrets) that let a test see exactly
// what reached the inner server. Where ohd depends on the real server's
// behaviour, the standin has it too, citing shared/reference/
// openhands-agent-server.md:
//
//   - arguments --host and --port after the entrypoint; the host defaults to
//     0.0.0.0 only when a session key is configured (§6 "Arguments");
//   - the conversations directory is OH_CONVERSATIONS_PATH, default the
//     relative workspace/conversations (from the image's WORKDIR /,
//     /workspace/conversations, which only uid 10001 can create); it is
//     created at start-up, and when that fails the process logs
//     "Application startup failed" and exits 1 before listening (§6);
//   - every conversation persists as <dir>/<id.hex>/meta.json,
//     base_state.json (execution_status, secret_registry) and
//     events/event-NNNNN-<id>.json, and is loaded again at start-up (§5);
//   - secrets (create body "secrets", POST .../secrets) are persisted as
//     Fernet tokens under OH_SECRET_KEY, else SESSION_API_KEY, else
//     OH_SESSION_API_KEYS_0, in plaintext with none (§1); a token that does
//     not decrypt under the present key is unreadable, as the real server
//     drops it;
//   - a create with an existing conversation_id answers 200 with it (§8);
//   - ConversationInfo carries the agent (secret fields redacted) and
//     every route answering one (create, get, ?ids=, search) trims
//     agent.agent_context.skills to [] unless include_skills is true; a
//     create's skills are checked and its disabled_skills dropped as
//     AgentContext does (§5 "Metadata reads"; skills.go cites the
//     source);
//   - the sockets close 4004 for an unknown conversation (§7, §8);
//   - LLM and agent profiles, a create's agent_profile_id (404 when
//     unknown), title_llm_profile, switch_llm and switch_profile as the
//     real server has them (profiles.go cites the source lines);
//   - bash events (the socket /sockets/bash-events and the /api/bash
//     routes) are files in OH_BASH_EVENTS_DIR, default the relative
//     workspace/bash_events, and every route that touches them fails as
//     the real server's do when that directory cannot be made (§9; bash.go
//     cites bash_service.py);
//   - a conversation's lease (owner_lease.json) names this host and pid,
//     and one another live owner holds is not served (404, 4004) until it
//     expires (§9; lease.go cites conversation_lease.py);
//   - /api/vscode/url and /api/desktop/url answer as the real routers, and
//     stand-ins of VS Code and noVNC listen on 8001 and 8002 (ports.go).
//
// # Environment
//
//	STANDIN_ADDR            listen address; overrides --host/--port (tests)
//	OH_CONVERSATIONS_PATH   conversations directory (default workspace/conversations)
//	OH_BASH_EVENTS_DIR      bash events directory (default workspace/bash_events, made on
//	                        first use; bash.go)
//	OH_LEASE_TTL_SECONDS    the conversation lease's TTL (default 45; 0: no lease; lease.go)
//	OH_ENABLE_VSCODE        VS Code on port 8001 (default true; ports.go)
//	OH_ENABLE_VNC           the desktop on port 8002 (default false; ports.go)
//	OH_VSCODE_BASE_PATH     VS Code's base path (ports.go)
//	OH_SECRET_KEY           key of the persisted secrets' cipher (see above)
//	OH_SESSION_API_KEYS_0   session API key; _1, _2, ... add more keys. With
//	                        no key configured authentication is off, as in
//	                        the agent server (a warning is logged).
//	OHD_CONVERSATION_ID     the conversation this container serves; shown by
//	                        /server_info and always accepted by the
//	                        WebSocket route, even before it is created
//	OH_CONVERSATION_RUNTIME shown by /server_info (default "local")
//	STANDIN_HEALTH_DELAY    duration: /health and /ready answer 503 until
//	                        this long after start (readiness tests)
//	STANDIN_EXIT_AFTER      duration: log a line to stderr and exit with
//	                        status 3 this long after start ("container
//	                        exits during start" tests)
//	STANDIN_ANY_ID          "1": the WebSocket route accepts any id
//
// SIGTERM and SIGINT stop the server within half a second (exit status 0).
//
// # Authentication
//
// Every route needs the header X-Session-API-Key to match one configured key
// (compared in constant time over SHA-256 digests, so neither content nor
// length leaks) except the agent server's unauthenticated "server details"
// routes: /alive, /health, /ready and /server_info. A failure answers 401
// {"detail":"Unauthorized"}. The sockets authenticate as the agent
// server's do (reference §7; sockauth.go): a key in the query parameter
// session_api_key (which takes precedence) or the header, a bad one
// refused with 403 before the upgrade; with neither, the first frame must
// be {"type":"auth","session_api_key":KEY} within 10 s, else 4001.
//
// # Routes
//
// Server details (no key):
//
//	GET  /alive        200 {"status":"ok"}
//	GET  /health       200 {"status":"ok"}; 503 {"status":"starting"} during STANDIN_HEALTH_DELAY
//	GET  /ready        200 {"status":"ready"}; 503 {"status":"initializing","message":...} during the delay
//	GET  /server_info  {"title","version","uptime","idle_time","conversation_id",
//	                    "conversation_runtime","uid","gid","pid","working_dir",
//	                    "capabilities":["conversation_runtime_routes_v1"]}
//
// Runtime routes (runtime.go: the terminal, git panel and file views'
// calls, global under /api and scoped under /api/conversations/{id}):
// POST bash/execute_bash_command, GET git/changes, GET git/diff, POST
// file/upload, GET file/download.
//
// Conversations (ids are UUIDs; any form Python's uuid.UUID accepts, answered
// in the canonical dashed lower-case form; a malformed id answers 422 like
// FastAPI's validation error {"detail":[{"type","loc","msg","input"}]}):
//
//	POST   /api/conversations                 body {"workspace":{"working_dir":DIR},"conversation_id"?:ID, ...}
//	                                          201 ConversationInfo (200 if the id already exists);
//	                                          400 if DIR is not a directory in this container; 422 if missing
//	GET    /api/conversations/{id}            ConversationInfo; 404 {"detail":"Not Found"}
//	GET    /api/conversations?ids=A&ids=B     [ConversationInfo|null, ...] in the order asked; 422 without ids
//	GET    /api/conversations/count           bare integer; ?status=idle|running|paused|... (422 if unknown)
//	GET    /api/conversations/search          {"items":[...],"next_page_id":STRING|null};
//	                                          ?limit=1..100 (default 100) &page_id= &status= &sort_order=
//	                                          CREATED_AT|CREATED_AT_DESC (default)|UPDATED_AT|UPDATED_AT_DESC
//	DELETE /api/conversations/{id}            {"success":true}; 400 {"detail":"Bad Request"} if unknown (as the agent server)
//	POST   /api/conversations/{id}/run        {"success":true}; sets execution_status "running"
//	POST   /api/conversations/{id}/pause      {"success":true}; sets execution_status "paused"
//	POST   /api/conversations/{id}/exec       see below
//	POST   /api/conversations/{id}/secrets    {"secrets":{NAME:"v"|{"value":"v"}|StaticSecret}} → {"success":true}
//	POST   /api/conversations/{id}/events     Message {"role","content"} → {"success":true}; persisted as a MessageEvent
//	GET    /api/conversations/{id}/events/search  {"items":[events, oldest first],"next_page_id":null}
//	GET    /api/conversations/{id}/standin/secrets  (standin only) {NAME:{"readable","encrypted","sha256"?}}
//
// ConversationInfo is {"id","agent"?,"workspace":{"kind":"LocalWorkspace","working_dir"},
// "execution_status","title":null,"created_at","updated_at"} (times RFC 3339,
// UTC); "agent" is the create's, secrets redacted, skills trimmed unless
// ?include_skills=true (create, get, ?ids= and search take it).
//
// Exec (the standin's own route; the agent server's bash router is not
// imitated because ohd forwards /api/conversations/{id}/{tail} and a test
// wants the conversation's working directory as the default):
//
//	POST /api/conversations/{id}/exec
//	  {"command":["git","status"]} or {"shell":"echo $HOME"} (needs /bin/sh),
//	  "cwd"?: absolute dir (default: the conversation's working_dir),
//	  "env"?: {"NAME":"value"} added to the server's environment,
//	  "stdin"?: string, "timeout_seconds"?: number (default 30, at most 600)
//	  → 200 {"stdout","stderr","exit_code","timed_out"?}
//	  exit_code 127: not found, 126: not executable, 124: timed out,
//	  128+N: killed by signal N. 404 if the conversation is unknown.
//
// Test routes, each both at the root and under /api/conversations/{id}/
// (where the id is not checked, so a proxy test needs no conversation):
//
//	ANY  /echo/...        {"method","path","request_uri","raw_query","host","headers",
//	                       "transfer_encoding","content_length","body","body_bytes","remote_addr"}
//	GET  /redirect        302, Location "http://<Host header><prefix>/echo/redirected"
//	                      (?to=/path overrides the path), body mentions the URL
//	GET  /error           500 {"detail":"... listening on <listen addr> (local address <ip:port>, Host <host>)"}
//	GET  /slow?ms=N       sleeps N ms (at most 10 minutes) → {"slept_ms":N}
//	GET  /stream?n=N      text/event-stream, N events "data: {\"i\":k}\n\n", each
//	                      flushed; &interval_ms=M waits M ms between events
//	POST /big             reads the whole body → {"bytes":N,"sha256":HEX}
//
// WebSocket:
//
//	GET /sockets/events/{id}
//	  first message {"type":"hello","conversation_id":ID,"auth":"header"|"query"|"frame"|"none",
//	  "kind":"ConversationStateUpdateEvent","key":"full_state","value":INFO|absent};
//	  then every new event of the conversation; a Message frame {"role",...}
//	  is sent to the conversation (persisted, then sent back as its event);
//	  a text message {"type":"close","code":N,"reason"?:S} closes with that
//	  code; anything else is echoed.
//	  An id that is not a created conversation, OHD_CONVERSATION_ID, or any id
//	  with STANDIN_ANY_ID=1 is closed with 4004 right after the upgrade.
//	GET /sockets/session/{id}?after_seq=N
//	  {"type":"sync","from_seq"?,"through_seq"?}, the events after N (-1: all;
//	  no after_seq: none) as {"type":"durable","seq","event"}, then live
//	  durable frames; Message frames are sent to the conversation.
//	GET /sockets/bash-events?resend_mode=all
//	  the agent server's one global bash socket (reference §7, bash.go):
//	  ExecuteBashRequest {"command","cwd"?,"timeout"?} frames run /bin/sh -c
//	  in the background; every subscriber gets {"kind":"BashCommand",...}
//	  then {"kind":"BashOutput","command_id","order","exit_code","stdout",
//	  "stderr",...}; a bad frame gets {"kind":"BashError","code","detail"};
//	  resend_mode=all replays the earlier events first.
//
// Unknown paths answer 404 {"detail":"Not Found"} (also for a known path with
// another method). Every request is logged to stderr as one line with
// method, path (never the query) and status; header values are never
// logged.
package main
