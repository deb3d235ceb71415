// Package runtime runs each conversation's inner agent server in its own
// hardened container, through the Docker Engine API, and reports what the
// engine knows about those containers.
//
// # Basics
//
// Start here: [Runtime] is the interface the orchestrator uses. [NewDocker]
// returns the Docker implementation (github.com/moby/moby/client, honouring
// DOCKER_HOST); [NewLocal] returns the one without containers, for agents
// that run on the host (Start succeeds with an empty [Instance], Exec and
// Logs return [ErrNoContainer]).
//
// A second backend, package runtime/kubernetes, runs each conversation in
// a pod on ohd's own node and fills the same interface; it starts from
// [PrepareSpec] (the defaults and checks Docker.Start applies), reaches
// its pods through [NewAddrDialer] (it is [DialOnly]), and says through
// [PolicyReporter] whether its egress isolation is enforced.
//
// A [Spec] says what one conversation's container is: image, uid:gid, bind
// mounts, environment, limits. [Docker.Start] creates it, starts it and
// waits until GET http://127.0.0.1:<port>/health answers 200; it returns an
// [Instance] with the published address and the create/start/ready
// [Timings]. A Spec with NoNetwork (ohd serve --egress broker) runs with
// network mode none and publishes nothing: the health check and every
// connection to the inner server go through the container's own network
// namespace ([Docker.OpenNetns]; [Docker.ProbeNetns] says whether this
// process can), the Instance's port being the inner port there, and the
// label dev.ohd.network=none says so to a later ohd. The runtime keeps no state of its own: the engine's labels are
// the record, which is what lets ohd adopt its containers after a restart
// ([Docker.List]) and follow them ([Docker.Events]).
//
// # Naming and labels
//
// A container is named "ohd-" + the first 12 hex digits of the
// conversation UUID ([ContainerName]) and carries the labels
// dev.ohd.server=<server id>, dev.ohd.conversation=<uuid> and
// dev.ohd.inner-port=<port> (the engine adds the image's own labels
// underneath; these win). Starting a conversation whose name is taken
// fails with [ErrConflict]; the runtime never removes a container it did
// not just create: reconciling leftovers is the caller's decision.
//
// # Container settings
//
// Every setting is visible in docker inspect:
//
//   - User "uid:gid" (the repository owner), CapDrop ALL,
//     SecurityOpt no-new-privileges, the engine's default seccomp profile
//     (never "unconfined"), Privileged false, private IPC, the engine's
//     default network (or DockerOptions.Network), never the host's
//     network, pid or ipc namespaces.
//   - Memory (with MemorySwap equal to it: no swap beyond the limit),
//     NanoCpus and PidsLimit; defaults 4 GiB, 2 CPUs (capped at the
//     engine's CPU count, which it would otherwise refuse), 512.
//   - Optional ReadonlyRootfs with Tmpfs /tmp
//     "rw,exec,nosuid,nodev,size=N,mode=1777" (exec because agents build
//     and run programs there; its pages count against the memory limit).
//   - ExposedPorts and PortBindings <port>/tcp -> 127.0.0.1 with HostPort
//     "": the engine picks a free port at start (no pick-then-bind race)
//     and the runtime reads it back by inspecting. It can change across a
//     stop and restart. OpenNetns (Linux, privileged, engine on this
//     machine) gives a dialer that reaches the inner port from inside the
//     container's own network namespace instead.
//   - NetworkMode DockerOptions.Network; IsolatedNetwork ("ohd") is
//     created if missing as a bridge with inter-container communication
//     off.
//   - Mounts exactly as given, type bind, with their ReadOnly flags,
//     propagation rprivate and BindOptions.NonRecursive: host mounts under
//     a source stay invisible, so a read-only mount is read-only for all the
//     container sees (engines before 25 do not make submounts read-only).
//     A source must exist (the Mounts API refuses to create it).
//   - Env exactly as given; the runtime adds nothing, and in particular
//     nothing from ohd's own environment. The engine adds the image's own
//     variables (PATH, ...). Env is readable by anyone who can inspect the
//     container: it must never hold a secret value.
//   - RestartPolicy "no": ohd owns the lifecycle. An engine restart policy
//     would bring a container back behind ohd's back (after a crash loop,
//     after ohd stopped an idle conversation, at engine start before ohd
//     has reconciled) and could race with Remove.
//   - Init true (the engine's docker-init, tini, as pid 1): zombies of the
//     agent's tools are reaped and SIGTERM reaches the server.
//   - Hostname HostnameOf(conversation id), the same for every container
//     of the conversation: the agent server's conversation lease names
//     its host, and a new hostname would leave the conversation 404 for
//     the lease's 45 s after a container loss.
//   - AutoRemove false: a failed start's logs must still be readable.
//   - LogConfig: with the json-file or local log driver, max-size 10m
//     (DockerOptions.LogMaxSize) and max-file 3, so a chatty or leaked
//     container cannot fill the disk; other drivers are left as the engine
//     configures them (a warning is logged).
//
// # Images
//
// [Docker.ResolveImage] turns a reference into the image ID a
// conversation records. A reference the engine lacks is pulled (POST
// /images/create, with no registry credentials); while it runs,
// [Docker.Pulls] reports its progress as the engine streams it (each
// layer's status and downloaded bytes, the image's last status line), and
// the log gets a line per layer status. Concurrent pulls of one reference
// share one record. The engine's strings are scrubbed of URL user
// information, URL queries and authorization values before they reach the
// log, Pulls or an error. A pull that fails (no registry answers) gives
// [ErrNotFound] naming the image and how to load it.
//
// # Failures
//
// Start removes the container on any failure, with a context the caller's
// cancellation does not reach, and returns a [*StartError]: the step that
// failed ([StepCreate], [StepStart], [StepReady]), the exit code if the
// container exited, and the last 20 lines of its output. It wraps a
// sentinel: [ErrNotFound] (missing image: the create does not pull, the
// message says to pull, load or build it), [ErrConflict], [ErrExited] (the container
// exited before it was ready: noticed at once through the engine's wait
// API, not at the timeout), [ErrNotReady] (no 200 within
// Spec.ReadyTimeout), [ErrEngineUnavailable], or the caller's context
// error. Restart on failure stops the container and keeps it.
//
// # Events
//
// [Docker.Events] follows the engine's container events for one server id
// (create, start, restart, stop, kill, die, oom, pause, unpause,
// destroy). It reconnects with backoff when the stream breaks, replays
// the events since the last one it delivered, and then delivers an
// [ActionResync] event: an engine restart forgets its events, so the
// receiver reconciles with List.
//
// # Engines
//
// The client negotiates the API version down to the engine's (it needs
// 1.40 or later). Everything here works on Docker 20.10 (API 1.41), cgroup
// v1, with the fuse-overlayfs storage driver, where it is tested; it uses
// no field newer than API 1.40 (BindOptions.NonRecursive is 1.40;
// CreateMountpoint and ReadOnlyNonRecursive are newer and unused).
//
// # Caveats
//
//   - A numeric uid absent from the image's /etc/passwd gets HOME=/; set
//     HOME in Spec.Env if the agent needs one.
//   - Exec inherits the container's user, capabilities (none) and
//     no-new-privileges; ExecOptions.User overrides only the user.
//   - Events asks for events since the moment it was called; across a
//     reconnect an event may be delivered twice, so handlers must be
//     idempotent.
package runtime
