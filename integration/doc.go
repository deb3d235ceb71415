// Package integration holds ohd's end-to-end tests: they build the real
// binaries (ohd, a static ohctl, and ohd with failpoints), run the daemon
// against real git repositories, Unix sockets and the Docker engine, and
// drive it through its real interfaces (ohctl, the sockets, HTTP), asserting
// what a user would see. The stand-in inner agent server they run in
// containers is in integration/standin.
package integration
