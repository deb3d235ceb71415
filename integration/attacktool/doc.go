// Command attacktool is the few file utilities an attacking agent needs
// inside the minimal test image (which has only sh and git): rm, ln, mv,
// mkdir, cp, cat, ls, chmod, defacl, trunc and findstr, chosen by the name it is
// run as.
// The gitview attack tests (integration/gitview_attack_test.go) build it
// statically and put it, with one link per name, into the attacker's git
// view, outside its worktree, so it is neither snapshotted nor published.
//
// The utilities take only the flags those tests use: rm -r -f, ln -s -f,
// mkdir -p, chmod with an octal mode or u+w / +x, and trunc PATH...
// (truncate every regular file below each path, making it writable
// first where allowed). findstr NEEDLE-B64R PATH... looks for a value
// (given base64 of its bytes reversed, so that the value itself never
// appears in a command line) in every readable regular file below the
// paths, staying on each path's file system, and in /proc/*/environ and
// /proc/*/cmdline; it prints "hit PATH" per file holding it and ends with
// "searched N files, M hits". Errors are printed and make the exit status 1,
// but every argument is tried.
//
// "attacktool net ..." (net.go) is the network attacker of the egress
// tests (integration/egress_test.go): raw TCP and UDP, DNS, HTTP and TLS
// through the environment's proxy, raw bytes to the proxy, a flood of
// CONNECTs, and a small server the tests run in a network namespace.
package main
