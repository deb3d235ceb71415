// Command attacktool is the few file utilities an attacking agent needs
// inside the minimal test image (which has only sh and git): rm, ln,
// mkdir, cp, cat, ls, chmod and trunc, chosen by the name it is run as.
// The gitview attack tests (integration/gitview_attack_test.go) build it
// statically and put it, with one link per name, into the attacker's git
// view, outside its worktree, so it is neither snapshotted nor published.
//
// The utilities take only the flags those tests use: rm -r -f, ln -s -f,
// mkdir -p, chmod with an octal mode or u+w / +x, and trunc PATH...
// (truncate every regular file below each path, making it writable
// first where allowed). Errors are printed and make the exit status 1,
// but every argument is tried.
//
// "attacktool net ..." (net.go) is the network attacker of the egress
// tests (integration/egress_test.go): raw TCP and UDP, DNS, HTTP and TLS
// through the environment's proxy, raw bytes to the proxy, a flood of
// CONNECTs, and a small server the tests run in a network namespace.
package main
