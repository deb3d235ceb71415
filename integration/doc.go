// Package integration holds ohd's end-to-end tests: they build the real
// binaries (ohd, a static ohctl, and ohd with failpoints), run the daemon
// against real git repositories, Unix sockets and the Docker engine, and
// drive it through its real interfaces (ohctl, the sockets, HTTP), asserting
// what a user would see. The stand-in inner agent server they run in
// containers is in integration/standin. Git clients: the test image carries
// the host's git; gitrelay_git247_test.go also runs Debian trixie's git 2.47
// in a container, from the packages in $OHD_GIT247_DEBS (.ci/git247-debs).
package integration
