package metrics

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure New. The zero value is safe.
type Options struct {
	// Conversations, if set, is called at every scrape and returns the
	// number of conversation records per state (store.State values). The
	// gauge is computed from it, so it cannot drift from the store. nil
	// leaves ohd_conversations out.
	Conversations func() map[string]int
	// Version, if set, is exported as ohd_build_info{version}.
	Version string
	// Logger receives errors of a scrape (a failing collector); nil
	// discards them.
	Logger *slog.Logger
}

// Metrics holds ohd's metrics in a registry of its own. Its methods are
// safe for concurrent use, and are no-ops on a nil *Metrics, so a package
// can hold an optional pointer.
type Metrics struct {
	reg *prometheus.Registry
	log *slog.Logger

	createStep    *prometheus.HistogramVec
	creates       *prometheus.CounterVec
	broker        *prometheus.CounterVec
	proxyRequests *prometheus.CounterVec
	proxyDuration *prometheus.HistogramVec
	wsOpen        prometheus.Gauge
	wsClosed      *prometheus.CounterVec
	starts        *prometheus.CounterVec
	deaths        *prometheus.CounterVec
	egress        *prometheus.CounterVec
	egressBytes   *prometheus.CounterVec
	publishFails  *prometheus.CounterVec
}

// Metric names; doc.go describes each.
const (
	NameConversations      = "ohd_conversations"
	NameCreateStepDuration = "ohd_conversation_create_step_duration_seconds"
	NameCreates            = "ohd_conversation_creates_total"
	NameBrokerRequests     = "ohd_broker_requests_total"
	NameEgressConnections  = "ohd_egress_connections_total"
	NameEgressBytes        = "ohd_egress_bytes_total"
	NameProxyRequests      = "ohd_proxy_requests_total"
	NameProxyDuration      = "ohd_proxy_request_duration_seconds"
	NameWebSocketsOpen     = "ohd_proxy_websockets_open"
	NameWebSocketsClosed   = "ohd_proxy_websockets_closed_total"
	NameContainerStarts    = "ohd_container_starts_total"
	NameContainerDeaths    = "ohd_container_deaths_total"
	NamePublishFailures    = "ohd_publish_failures_total"
	NameBuildInfo          = "ohd_build_info"
)

// Histogram buckets, in seconds. A create waits for an image's inner
// server to come up (seconds to minutes); a proxied request is usually
// milliseconds, but a forwarded create or a slow inner route takes longer.
var (
	createBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}
	proxyBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
)

// New returns Metrics registered in a new registry, with the Go runtime
// and process collectors.
func New(opts Options) *Metrics {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: log,
		createStep: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameCreateStepDuration,
			Help:    "Time taken by each completed step of a conversation create; step total is the whole create, observed for successful creates.",
			Buckets: createBuckets,
		}, []string{"step"}),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameCreates,
			Help: "Conversation creates by result (ok, failed) and the step that failed (none when ok).",
		}, []string{"result", "step"}),
		broker: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameBrokerRequests,
			Help: "Credential broker requests by route pattern, grant kind, result (allowed, refused) and error code (none when allowed).",
		}, []string{"route", "kind", "result", "code"}),
		proxyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameProxyRequests,
			Help: "Conversation API requests by route and HTTP status code answered.",
		}, []string{"route", "code"}),
		proxyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameProxyDuration,
			Help:    "Conversation API request duration by route and status class; for the events route, how long the WebSocket was open.",
			Buckets: proxyBuckets,
		}, []string{"route", "class"}),
		wsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: NameWebSocketsOpen,
			Help: "Client WebSockets open on the conversation API.",
		}),
		wsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameWebSocketsClosed,
			Help: "Client WebSockets closed, by the close code sent to the client (1006 if none could be sent).",
		}, []string{"code"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameContainerStarts,
			Help: "Container starts (at create and restart) by result (ok, failed) and the step that failed (create, start, ready; none when ok).",
		}, []string{"result", "step"}),
		deaths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameContainerDeaths,
			Help: "Containers of running conversations that died or were removed behind ohd's back, by engine action (die, oom, destroy).",
		}, []string{"action"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameEgressConnections,
			Help: "Egress connections through the broker by verdict: allowed, or the refusal's reason (not_granted, loopback, private, metadata, ...).",
		}, []string{"verdict"}),
		egressBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameEgressBytes,
			Help: "Bytes carried by egress connections, by direction (out: to the destination, in: from it).",
		}, []string{"direction"}),
		publishFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NamePublishFailures,
			Help: "Publishes of a git view (and saves at removal) that failed, by reason: a refusal by the import's bounds or validation, a conflict, a stale lock, or an error.",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.createStep, m.creates, m.broker, m.proxyRequests, m.proxyDuration,
		m.wsOpen, m.wsClosed, m.starts, m.deaths, m.egress, m.egressBytes, m.publishFails,
	)
	for v := range egressVerdicts {
		m.egress.WithLabelValues(v)
	}
	if opts.Conversations != nil {
		m.reg.MustRegister(&conversationCollector{count: opts.Conversations})
	}
	if opts.Version != "" {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        NameBuildInfo,
			Help:        "Always 1; the version label is the running ohd's version.",
			ConstLabels: prometheus.Labels{"version": opts.Version},
		}, func() float64 { return 1 }))
	}
	m.initSeries()
	return m
}

// initSeries creates the series whose labels are known in advance at
// zero, so they are scraped (and rates computed) before the first event.
// Failure and refusal series appear with their first occurrence.
func (m *Metrics) initSeries() {
	for _, s := range createSteps {
		m.createStep.WithLabelValues(s)
	}
	m.creates.WithLabelValues("ok", LabelNone)
	for _, r := range brokerRoutes {
		if r.served {
			m.broker.WithLabelValues(r.route, r.kind, "allowed", LabelNone)
		}
	}
	m.starts.WithLabelValues("ok", LabelNone)
	for _, a := range containerActions {
		m.deaths.WithLabelValues(a)
	}
	for _, r := range publishReasons {
		m.publishFails.WithLabelValues(r)
	}
}

// Handler serves the registry in the Prometheus text (or OpenMetrics, if
// asked) format. A nil *Metrics answers 404.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          m.reg,
		EnableOpenMetrics: true,
	}))
}

// Registry returns the registry, for tests and for callers that add
// collectors of their own; nil for a nil *Metrics.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// ObserveCreateStep records how long a completed create step took: step
// is one of worktree, broker, container_create, container_start,
// container_ready, forward, or total (the whole successful create).
// Another step is recorded as "other".
func (m *Metrics) ObserveCreateStep(step string, d time.Duration) {
	if m == nil {
		return
	}
	m.createStep.WithLabelValues(bounded(createStepSet, step)).Observe(d.Seconds())
}

var createStepSet = set(createSteps...)

// CreateResult counts a finished create: ok, or failed at failedStep
// (a conversation.StepError's Step, with "container" refined to
// container_create, container_start or container_ready when the runtime
// named the step). failedStep is ignored when ok.
func (m *Metrics) CreateResult(ok bool, failedStep string) {
	if m == nil {
		return
	}
	if ok {
		m.creates.WithLabelValues("ok", LabelNone).Inc()
		return
	}
	m.creates.WithLabelValues("failed", bounded(createFailSteps, failedStep)).Inc()
}

// BrokerRequest counts one broker request, from its audit record: the
// route pattern (never the path: a name in it would make a series per
// name), the grant kind, whether it was allowed, and the error code if
// refused. Unknown routes, kinds and codes are counted as "other".
func (m *Metrics) BrokerRequest(route, kind string, allowed bool, code string) {
	if m == nil {
		return
	}
	result, c := "refused", bounded(brokerCodes, code)
	if allowed {
		result, c = "allowed", LabelNone
	}
	m.broker.WithLabelValues(bounded(brokerRouteSet, route), bounded(brokerKinds, kind), result, c).Inc()
}

// EgressConnection counts an egress connection that ended: allowed, or
// refused for reason (pkg/broker's audit reason; one outside the known
// set is "other"), and its bytes each way.
func (m *Metrics) EgressConnection(allowed bool, reason string, out, in int64) {
	if m == nil {
		return
	}
	v := "allowed"
	if !allowed {
		v = bounded(egressVerdicts, reason)
	}
	m.egress.WithLabelValues(v).Inc()
	if out > 0 {
		m.egressBytes.WithLabelValues("out").Add(float64(out))
	}
	if in > 0 {
		m.egressBytes.WithLabelValues("in").Add(float64(in))
	}
}

// ContainerStart counts a container start (a create's or a restart's):
// ok, or failed at step (runtime.StartError's Step: create, start or
// ready; anything else is "other"). step is ignored when ok.
func (m *Metrics) ContainerStart(ok bool, step string) {
	if m == nil {
		return
	}
	if ok {
		m.starts.WithLabelValues("ok", LabelNone).Inc()
		return
	}
	m.starts.WithLabelValues("failed", bounded(containerSteps, step)).Inc()
}

// PublishFailed counts a failed publish of a git view by reason
// (worktree.RefusalReason values: gitimport's, "conflict", "stale_lock",
// "error").
func (m *Metrics) PublishFailed(reason string) {
	if m == nil {
		return
	}
	m.publishFails.WithLabelValues(bounded(publishReasonSet, reason)).Inc()
}

// ContainerGone counts a running conversation's container that went away
// behind ohd's back, by the engine event's action (die, oom, destroy).
func (m *Metrics) ContainerGone(action string) {
	if m == nil {
		return
	}
	m.deaths.WithLabelValues(bounded(containerActionSet, action)).Inc()
}

// EgressCounter returns the egress connections counter of verdict (tests).
func (m *Metrics) EgressCounter(verdict string) prometheus.Counter {
	return m.egress.WithLabelValues(verdict)
}
