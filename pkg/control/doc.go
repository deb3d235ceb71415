// Package control is ohd's control API: the JSON types spoken over the
// daemon's control socket and the client ohctl uses.
//
// The API is HTTP over a Unix socket (0600; only the daemon's uid and root
// may connect, checked with SO_PEERCRED). Routes, all under /v1:
//
//	GET    /v1/version
//	GET    /v1/pulls                                 → []Pull: the image pulls in progress
//	GET    /v1/conversations                         → []store.Conversation
//	POST   /v1/conversations                         CreateRequest → store.Conversation (201)
//	GET    /v1/conversations/{id}                    → store.Conversation
//	DELETE /v1/conversations/{id}[?discard=true]     → store.Conversation (with its Removal)
//	POST   /v1/conversations/{id}/grants             GrantRequest → store.Conversation
//	DELETE /v1/conversations/{id}/grants/{kind}/{name}
//	POST   /v1/conversations/{id}/token/rotate       → store.Conversation
//	GET    /v1/conversations/{id}/logs[?follow=true] → the container's output (text stream)
//	POST   /v1/conversations/{id}/exec               ExecRequest [+ stdin, or ExecInput lines with tty] → ExecFrame lines (NDJSON stream)
//	POST   /v1/prune                                 PruneRequest → PruneReport
//	GET    /v1/doctor[?id=ID|?repo=PATH]             → DoctorReport (POST with repair=true repairs)
//	GET    /v1/secrets                               → []store.SecretInfo
//	PUT    /v1/secrets/{name}                        body: the raw value
//	DELETE /v1/secrets/{name}
//	GET    /v1/git-credentials, PUT|DELETE /v1/git-credentials/{host}
//	GET    /v1/llm-profiles,    PUT|DELETE /v1/llm-profiles/{name}
//	GET    /v1/oauth-servers,   PUT|DELETE /v1/oauth-servers/{name}
//	GET    /v1/audit[?conversation=ID&limit=N]       → []store.AuditRecord
//
// Errors answer {"error": "...", "code": "..."} with a status that matches
// the code (see the Code constants).
//
// Start at control.go (the request and answer types and the Code
// constants), client.go (Client, one method per route) and paths.go (the
// default socket and directories).
package control
