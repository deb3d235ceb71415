package metrics

import (
	"net/http"
	"strconv"
)

// Label values outside a known set. Every label of every metric is drawn
// from a fixed set, so no input (a secret name, a path, a status an inner
// server invents) can grow the number of series.
const (
	// LabelNone stands for an empty value: an ok create has no failed
	// step, an allowed broker request no error code.
	LabelNone = "none"
	// LabelOther stands for any value outside the metric's known set.
	LabelOther = "other"
)

// Conversation states, as pkg/store names them.
var conversationStates = []string{"provisioning", "running", "stopped", "failed", "deleted"}

// Create steps timed by ObserveCreateStep.
var createSteps = []string{
	"worktree", "broker", "container_create", "container_start", "container_ready", "forward", "total",
}

// Steps a create can fail at: pkg/conversation's StepError.Step values,
// with "container" refined to the runtime's step when the runtime said
// which one failed.
var createFailSteps = set(
	"worktree", "broker", "image", "container", "container_create", "container_start",
	"container_ready", "forward", "record", "interrupted",
)

// Broker route patterns (pkg/broker's AuditRecord.Route) and the grant
// kind each one carries. "" (no route matched) is reported as "none". A
// git-credential request is audited under its action's route once the
// action is known, under the bare route if refused before.
var brokerRoutes = []struct {
	route, kind string
	// served: the route can be allowed (its allowed series is
	// initialized at zero).
	served bool
}{
	{"GET /v1/whoami", LabelNone, true},
	{"GET /v1/secrets", LabelNone, true},
	{"GET /v1/secrets/{name}", "secret", true},
	{"POST /v1/git-credential", "git", false},
	{"POST /v1/git-credential?action=get", "git", true},
	{"POST /v1/git-credential?action=store", "git", true},
	{"POST /v1/git-credential?action=erase", "git", true},
	{"GET /v1/llm/{profile}", "llm", true},
	{"ANY /v1/llm/{profile}/proxy/{path...}", "llm", true},
	{"GET /v1/oauth/{server}/token", "oauth", true},
	{"ANY /v1/mcp/{server}/proxy", "mcp", true},
	{"ANY /v1/git/{host}/{path...}", "git", true},
	{"GET /v1/egress/{dest}", "net", true},
}

var (
	brokerRouteSet = func() map[string]string {
		m := map[string]string{}
		for _, r := range brokerRoutes {
			m[r.route] = r.route
		}
		return m
	}()
	brokerKinds = set("secret", "git", "llm", "oauth", "mcp", "net")
	// The broker's error codes (pkg/broker's Code* constants).
	brokerCodes = set("unauthenticated", "not_granted", "not_found", "bad_request",
		"too_large", "rate_limited", "internal", "bad_gateway", "audit_unavailable")
)

// Verdicts of egress connections: allowed, or the broker's audit reason
// for a refusal (pkg/egress's address classes and the broker's own).
var egressVerdicts = set("allowed", "not_granted", "resolve_failed", "own_addresses", "loopback", "private",
	"link_local", "cgnat", "metadata", "unspecified", "multicast", "reserved", "host_address",
	"dial_failed", "in_flight", "egress_rate", "rate", "bad_request", "upgrade", "audit_unavailable")

// Route labels of pkg/proxy's Observer.
var proxyRoutes = set("create", "get", "batch_get", "count", "search", "delete",
	"forward", "events", "health", "not_found", "metrics", "upstream", "server_info")

// Steps of a container start (pkg/runtime's StartError.Step values).
var containerSteps = set("create", "start", "ready")

// Engine event actions of a container that went away (pkg/runtime's
// Event.Action values pkg/conversation acts on).
var containerActions = []string{"die", "oom", "destroy"}

var containerActionSet = set(containerActions...)

// Reasons a publish fails (pkg/gitimport's refusal reasons, with
// packcheck's, and pkg/conversation's conflict, stale_lock, held (a gitlink
// into a repository the agent made, worktree.ErrHeld) and error).
var publishReasons = []string{
	"too_many_objects", "object_too_large", "pack_too_large", "expands_too_much", "malformed_pack",
	"tree_too_deep", "not_a_commit", "missing_objects", "invalid_objects", "conflict", "stale_lock", "locked", "held", "error",
}

var publishReasonSet = set(publishReasons...)

// set maps each value to itself, so that a lookup returns the canonical
// string (a constant) rather than keeping the caller's.
func set(vals ...string) map[string]string {
	m := make(map[string]string, len(vals))
	for _, v := range vals {
		m[v] = v
	}
	return m
}

// bounded returns v if known holds it, LabelNone if v is empty, and
// LabelOther otherwise.
func bounded(known map[string]string, v string) string {
	if v == "" {
		return LabelNone
	}
	if c, ok := known[v]; ok {
		return c
	}
	return LabelOther
}

// statusCode is an HTTP status as a label: the number for a status
// net/http knows (about sixty), LabelOther for anything else.
func statusCode(code int) string {
	if code < 100 || code > 599 || statusLabels[code-100] == "" {
		return LabelOther
	}
	return statusLabels[code-100]
}

// statusLabels holds the label of every status net/http knows, indexed by
// status-100, so that a request's observation allocates nothing.
var statusLabels = func() (l [500]string) {
	for c := 100; c < 600; c++ {
		if http.StatusText(c) != "" {
			l[c-100] = strconv.Itoa(c)
		}
	}
	return l
}()

var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// statusClass is an HTTP status's class ("2xx"), LabelOther outside
// 100-599.
func statusClass(code int) string {
	if code < 100 || code > 599 {
		return LabelOther
	}
	return statusClasses[code/100-1]
}

// closeCode is a WebSocket close code as a label: the codes of RFC 6455
// and its registry (1000-1015) and ohd's own 4001 (authentication failed)
// exactly; other application codes by range ("3xxx", "4xxx"); anything
// else LabelOther.
func closeCode(code int) string {
	switch {
	case code >= 1000 && code <= 1015, code == 4001:
		return strconv.Itoa(code)
	case code >= 3000 && code <= 3999:
		return "3xxx"
	case code >= 4000 && code <= 4999:
		return "4xxx"
	}
	return LabelOther
}
