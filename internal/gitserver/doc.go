// Package gitserver is a real git host for tests and benchmarks: `git
// http-backend` (git's own smart-HTTP server, as a CGI) behind an
// httptest server on loopback that demands a credential, Basic or
// Bearer, and records every Authorization it is sent, so tests can show
// where a token went.
//
// Start with [Start]; [Server.Repo] makes a bare repository that accepts
// pushes and partial clones.
package gitserver
