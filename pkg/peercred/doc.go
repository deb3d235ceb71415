// Package peercred reads the credentials of the process at the other end of
// a Unix-domain socket connection (SO_PEERCRED on Linux, LOCAL_PEERCRED and
// LOCAL_PEERPID on macOS) and carries them on request contexts.
//
// The kernel records the peer's credentials when the connection is made, so
// the uid and gid cannot be forged by the peer and do not change if the peer
// later changes its own credentials. The pid is the pid at connect time: it
// is a fact for audit, not a handle on a process (ohd never inspects a peer
// by pid, which another process may have taken since).
//
// Serve HTTP on a Unix socket with [ConnContext] as the server's
// ConnContext, and read the peer in handlers with [FromContext]:
//
//	srv := &http.Server{Handler: h, ConnContext: peercred.ConnContext}
//	...
//	cred, ok := peercred.FromContext(r.Context())
package peercred
