// Package metrics exports ohd's Prometheus metrics.
//
// Start with [New], which builds a [Metrics] with a registry of its own
// (never the process-wide default registry) holding ohd's series, the Go
// runtime collector and the process collector, and serve [Metrics.Handler].
// The daemon and the packages report through small methods:
// [Metrics.ObserveCreateStep], [Metrics.CreateResult],
// [Metrics.BrokerRequest], [Metrics.ContainerStart],
// [Metrics.ContainerGone], [Metrics.PublishFailed], and [Metrics.ProxyObserver] for pkg/proxy's
// Options.Observer. Every method is a no-op on a nil *Metrics, so a
// package can hold an optional pointer and call it unconditionally.
//
// # Metrics
//
//	name                                           type       labels                     meaning
//	ohd_conversations                              gauge      state                      conversation records per state, counted from the store at scrape time
//	ohd_conversation_create_step_duration_seconds  histogram  step                       time of each completed create step; step="total" is a whole successful create
//	ohd_conversation_creates_total                 counter    result, step               creates by result, and the step that failed
//	ohd_broker_requests_total                      counter    route, kind, result, code  credential broker requests (one per audit record)
//	ohd_egress_connections_total                   counter    verdict                    egress connections by verdict: allowed, or the refusal's reason (loopback, not_granted, ...)
//	ohd_egress_bytes_total                         counter    direction                  bytes of egress connections, out (to the destination) and in
//	ohd_proxy_requests_total                       counter    route, code                conversation API requests by route and HTTP status answered
//	ohd_proxy_request_duration_seconds             histogram  route, class               conversation API request duration; for events, how long the WebSocket was open
//	ohd_proxy_websockets_open                      gauge                                 client WebSockets open now
//	ohd_proxy_websockets_closed_total              counter    code                       client WebSockets closed, by the close code sent to the client
//	ohd_container_starts_total                     counter    result, step               container starts, at create and at restart, by result and failed step
//	ohd_container_deaths_total                     counter    action                     containers of running conversations that died or were removed behind ohd's back
//	ohd_publish_failures_total                     counter    reason                     failed publishes of git views (and saves at removal), by reason
//	ohd_build_info                                 gauge      version                    always 1, when the daemon passes its version
//
// The label values:
//
//	state    provisioning, running, stopped, failed, deleted
//	step     create step histogram: worktree, broker, container_create, container_start, container_ready, forward, total
//	         creates_total: worktree, broker, image, container, container_create, container_start, container_ready, forward, record, interrupted (none when ok)
//	         container_starts_total: create, start, ready (none when ok)
//	result   ok, failed (creates, container starts); allowed, refused (broker)
//	route    broker: the audit record's route pattern: "GET /v1/whoami", "GET /v1/secrets", "GET /v1/secrets/{name}",
//	         "POST /v1/git-credential" (refused before the action was read), "POST /v1/git-credential?action=get|store|erase",
//	         "GET /v1/llm/{profile}", "ANY /v1/llm/{profile}/proxy/{path...}", "GET /v1/oauth/{server}/token",
//	         "ANY /v1/mcp/{server}/proxy", none (no such route)
//	         proxy: create, get, batch_get, count, search, delete, forward, events, health, not_found, metrics
//	kind     secret, git, llm, oauth, mcp, none
//	reason   too_many_objects, object_too_large, pack_too_large, expands_too_much, malformed_pack, tree_too_deep,
//	         not_a_commit, missing_objects, invalid_objects, conflict, stale_lock, locked, error
//	code     broker: unauthenticated, not_granted, not_found, bad_request, too_large, rate_limited, internal, bad_gateway, audit_unavailable (none when allowed)
//	         proxy: the HTTP status (e.g. 201, 401, 502) if net/http knows it
//	         websockets: the close code, 1000-1015 and 4001 (authentication failed) exactly, else 3xxx or 4xxx
//	class    1xx, 2xx, 3xx, 4xx, 5xx
//	action   die, oom, destroy
//
// Besides these, the registry serves the Go collector's go_* series, the
// process collector's process_* series (Linux), and promhttp's
// promhttp_metric_handler_* series about the scrapes themselves.
//
// # Bounded labels
//
// Every label value comes from a fixed set; an empty value is reported as
// "none" and a value outside the set as "other". So no input can create
// series without bound: a secret name passed where a route belongs, a
// status an inner server invents, a close code a client picks. Names of
// conversations, secrets, hosts or profiles never appear in a label: the
// metrics say how much and how fast, the audit log says who and what.
//
// Series whose labels are known in advance start at zero (every state,
// every create step, the ok create and container start, the allowed
// request of every broker route, every death action), so they are
// scraped, and rates computed, before the first event. Failure and
// refusal series, and the proxy's series, appear with their first
// occurrence.
//
// # Caveats
//
// ohd_conversations is absent unless Options.Conversations is set: it is
// computed by calling it, never by counting transitions, so it cannot
// drift from the store. Counters restart at zero with the daemon, as
// Prometheus expects. The events route's duration is a connection's
// lifetime: most fall in the +Inf bucket; use its _count, or the
// WebSocket series, for rates.
package metrics
