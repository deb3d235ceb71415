// Package sdnotify lets ohd run as a systemd service: it tells the service
// manager when the daemon is ready and when it is stopping (sd_notify), and
// takes the listening sockets systemd opened for it (socket activation,
// sd_listen_fds_with_names). It depends on nothing but the standard library
// and golang.org/x/sys/unix.
//
// # Start here
//
// A daemon calls [Listeners] once, early, before it opens any listener of its
// own: a socket systemd passed under a name is used instead of binding the
// configured address. Once everything serves it calls [Ready]; when its
// context ends it calls [Stopping] before it shuts down. Outside systemd every
// call is a no-op that reports false (or an empty map), so the same code runs
// under launchd, in a terminal and in tests.
//
// # Notification
//
// [Notify] sends one datagram to the AF_UNIX socket named by $NOTIFY_SOCKET:
// an absolute path, or an abstract socket written "@name". The unit must say
// Type=notify; NotifyAccess=main is enough, since ohd sends from its main
// process. [Status] strips newlines from its message, because the protocol is
// newline-separated assignments and a message must not be able to inject
// READY=1 or MAINPID=. $NOTIFY_SOCKET is left in the environment (STOPPING=1
// is sent later through it); ohd runs its children with their own fixed
// environment, so they do not see it.
//
// # Socket activation
//
// [Listeners] implements sd_listen_fds_with_names(unset_environment=1):
// $LISTEN_PID must equal this process's pid (otherwise the variables were
// meant for a parent, and nothing is taken), $LISTEN_FDS file descriptors
// start at 3, and $LISTEN_FDNAMES (colon-separated, set by systemd from each
// socket unit's FileDescriptorName=) names them; without it every descriptor
// is named "unknown". The descriptors are marked close-on-exec and the three
// variables are removed from the environment, so child processes neither
// inherit the sockets nor believe they were activated.
//
// FileDescriptorName= names every socket of one .socket unit, so two sockets
// that need different names come from two units. ohd uses two names:
//
//   - [NameControl] ("control"): the Unix control socket for ohctl
//     (ohd.socket);
//   - [NameAPI] ("api"): the TCP conversation API (ohd-api.socket).
//
// # Caveats
//
// When the control socket comes from systemd, its file mode and owner are the
// .socket unit's SocketMode= (0600), SocketUser= and SocketGroup= (root): the
// daemon does not chmod a socket it did not create, and does not unlink it on
// exit (systemd owns the file). ohd's peer-credential check still admits only
// its own uid and root.
//
// Only stream listening sockets (SOCK_STREAM, Accept=no) are supported:
// [Listeners] returns an error naming the descriptor for anything else.
package sdnotify
