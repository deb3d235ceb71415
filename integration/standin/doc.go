// Command standin stands in for the OpenHands "inner" agent server inside a
// conversation container, so ohd's runtime, proxy and end-to-end tests can
// run a real container without the real (Python, multi-gigabyte) agent
// server. It is built statically (CGO_ENABLED=0) into the test image
// ohd-test-agent:dev by internal/testimage, as /usr/local/bin/standin.
//
// It speaks the parts of the agent server's API that ohd touches, with the
// same shapes and status codes, keeps conversations in memory, and adds a few
// test-only routes (echo, redirect, slow, stream, exec) that let a test see
// exactly what reached the inner server.
//
// # Environment
//
//	STANDIN_ADDR            listen address (default 0.0.0.0:8000)
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
// {"detail":"Unauthorized"}. The WebSocket route also accepts the key in the
// query parameter session_api_key; a bad key is refused with 401 before the
// upgrade.
//
// # Routes
//
// Server details (no key):
//
//	GET  /alive        200 {"status":"ok"}
//	GET  /health       200 {"status":"ok"}; 503 {"status":"starting"} during STANDIN_HEALTH_DELAY
//	GET  /ready        200 {"status":"ready"}; 503 {"status":"initializing","message":...} during the delay
//	GET  /server_info  {"title","version","uptime","idle_time","conversation_id",
//	                    "conversation_runtime","uid","gid","pid","working_dir"}
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
//
// ConversationInfo is {"id","workspace":{"kind":"LocalWorkspace","working_dir"},
// "execution_status","title":null,"created_at","updated_at"} (times RFC 3339,
// UTC).
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
//	  first message {"type":"hello","conversation_id":ID,"auth":"header"|"query"|"none"};
//	  then echoes every text and binary message; a text message
//	  {"type":"close","code":N,"reason"?:S} closes with that code.
//	  An id that is not a created conversation, OHD_CONVERSATION_ID, or any id
//	  with STANDIN_ANY_ID=1 is closed with 1008 right after the upgrade.
//
// Unknown paths answer 404 {"detail":"Not Found"} (also for a known path with
// another method). Every request is logged to stderr as one line with
// method, path (never the query) and status; header values are never
// logged.
package main
