// Package kubernetes is ohd's Kubernetes runtime: each conversation's
// inner agent server runs in a pod of its own on ohd's own node, through
// the Kubernetes API (client-go), filling the same [runtime.Runtime]
// interface as the Docker runtime. ohd runs on every node (a DaemonSet,
// packaging/kubernetes); its worktrees and sockets are that node's.
//
// # Basics
//
// Start here: [New] connects (a kubeconfig, or the in-cluster
// ServiceAccount) and returns a [*Kube]. [Kube.Start] creates the pod that
// [Kube.PodFor] describes, waits until its container runs and its inner
// server answers GET <health path> with 200 at the pod's IP, and returns
// an Instance whose ContainerID is "<pod name>/<pod UID>" ([ID]): a later
// pod of the same conversation (same name) is another container.
//
// # The pod
//
//   - Named [runtime.ContainerName] of the conversation, in
//     Options.Namespace, with the Docker runtime's labels
//     (dev.ohd.server, dev.ohd.conversation, dev.ohd.inner-port,
//     dev.ohd.network, dev.ohd.role): the labels are the only record, so a
//     restarted ohd adopts its live pods with List, as with Docker.
//   - nodeName is ohd's node (Options.Node, else NODE_NAME from the
//     downward API): no scheduler, and the hostPath volumes are this
//     node's directories.
//   - Every Spec mount is a hostPath volume at the same path as on Docker
//     (worktree, git view, inner state, broker directory with its socket,
//     the helper), read-only where asked (recursively where the runtime
//     can).
//   - Hardening: runAsUser/runAsGroup from the Spec, allowPrivilegeEscalation
//     false (no-new-privileges), privileged false, capabilities drop ALL,
//     seccomp RuntimeDefault, readOnlyRootFilesystem with a memory emptyDir
//     at /tmp (Spec.ReadOnlyRootfs), no host namespaces, no service
//     account token, no service links; memory and CPU limits from the Spec
//     with small requests (a node holds as many conversations as it bears,
//     as Docker does). Kubernetes has no per-pod pids limit: the kubelet's
//     podPidsLimit applies (scripts/kube sets 512).
//   - restartPolicy Never: ohd owns the lifecycle, as with Docker's
//     restart policy "no".
//   - imagePullPolicy Never (the node's images only) unless
//     Options.PullImages; a missing image fails at once with ErrNotFound
//     saying how to import it.
//   - The container's command is the image's entrypoint wrapped by ohd,
//     so ohd reads the image's configuration, which the API server does
//     not show: [CRIImageConfig] asks the node's container runtime over the
//     CRI (ImageStatus, verbose), as the kubelet does; no Docker engine on
//     the node.
//   - Hostname [runtime.HostnameOf] the conversation, stable across pods.
//
// # Lifecycle
//
// Stop deletes the pod (SIGTERM, SIGKILL after the timeout) and waits
// until the kubelet has stopped it: a stopped conversation has no pod; its
// state stays on the node's disk. Restart finds no pod (ErrNotFound), so
// the conversation manager creates a new one with Start: resume is a
// recreate. Remove deletes the pod and its NetworkPolicy. Pause cannot
// freeze a pod (Kubernetes has no such call): it stops it and says so
// (ErrNotRunning).
//
// # Reaching the inner server
//
// Nothing is published. The inner server is reached at the pod's IP on
// the node, where ohd runs and the network plugin routes pod IPs:
// [Kube.OpenNetns] returns a dialer to it ([runtime.NewAddrDialer]), so
// every Instance says NoNetwork (reached only through that dialer) and
// HostPort is the inner port.
//
// # Egress
//
// In broker mode (Spec.NoNetwork), a deny-all egress NetworkPolicy
// selecting the conversation's pods is created before the pod, and the pod
// gets no DNS. Only a network plugin with a policy engine enforces it
// (Calico, Cilium, Antrea, kube-router, Weave Net); the bridge plugin and
// flannel store it and enforce nothing. [Kube.PolicyEnforcement] says
// whether ohd knows it is enforced, and why not.
//
// # Exec, logs, events
//
// Exec and Logs go through the API server (exec over WebSocket with a
// SPDY fallback; logs merge stdout and stderr). Events watches the pods
// and reports the Docker runtime's actions; a kill for memory (the
// container's OOMKilled) and an eviction by the kubelet are both
// reported as Docker reports an OOM kill: an "oom" event and
// Container.OOMKilled.
//
// # Deadlines
//
// Every API call runs under the caller's deadline, or [CallTimeout] when it
// has none; watches, log streams and exec sessions end with their context.
// The API server answers even when the node's container runtime is wedged
// on a pod (its containerd shim stopped): what hangs then is the kubelet's
// exec and kill. So an exec that has said nothing within
// Options.EngineTimeout is checked with an empty command, and given up if
// that does not run either; a pod the kubelet has not stopped within its
// grace period and the engine timeout is given up; both are recorded as
// stalls ([Kube.Stalls], [runtime.StallReporter]) that ohctl show and
// ohctl doctor list, and fail with [runtime.ErrEngineTimeout]. The
// kubelet's other pods go on meanwhile. [RouteClientLogs] sends
// client-go's own log lines to ohd's log at debug level.
package kubernetes
