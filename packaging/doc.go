// Package packaging holds ohd's service definitions — systemd units in
// systemd/, a launchd property list in launchd/ — and the tests that check
// them: `systemd-analyze verify` and an offline `systemd-analyze security`
// score on the units, a strict property-list parse of the plist (what
// `plutil -lint` checks), that every flag and OHD_* variable they name exists
// in `ohd serve --help`, and, end to end with a built ohd, that the daemon
// notifies a (fake) $NOTIFY_SOCKET and serves on sockets passed with
// $LISTEN_FDS. See README.md for installing them.
package packaging
