// Package egress is the policy of a conversation's way out: which
// destinations a container may reach through its broker, and which
// address the broker then dials.
//
// # Basics
//
// A grant is a [Dest] ([ParseDest]): "HOST[:PORT]" (port 443 when absent),
// "*.example.com[:PORT]" for every host below example.com (not
// example.com itself), or an IP literal ("10.0.0.7:8080",
// "[fd00::1]:443"). A client asks for a [Target] (a CONNECT authority or
// an absolute URL's host and port, [ParseTarget]). [Policy.Check] says
// whether the target is granted, resolves a name on the host, refuses
// every address of [Blocked] (loopback, private, ULA, link-local, CGNAT,
// cloud metadata, unspecified, multicast, reserved, and the host's own
// interface addresses) unless a grant names that exact IP:port, and
// returns the one address to dial: the broker dials it and nothing else,
// so a name cannot be rebound between the check and the dial.
//
// Start with [Policy.Check]; every refusal is a *[Refusal] whose Reason
// goes to the audit log and whose Error() is the one line the client is
// told, naming the command that would grant the destination.
//
// # Caveats
//
//   - A wildcard grant matches by name: "*.example.com" lets through any
//     host below example.com, but never an address Blocked refuses (a
//     name of that domain pointed at 127.0.0.1 is still refused).
//   - Only the first allowed address of a name is dialled; a name whose
//     first public address is down fails rather than trying the next.
package egress
