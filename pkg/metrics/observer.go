package metrics

import "time"

// ProxyObserver receives pkg/proxy's request and WebSocket events; it
// satisfies proxy.Observer (this package does not import proxy, which
// depends on the packages that report here). The zero value, and the one
// a nil *Metrics returns, does nothing.
type ProxyObserver struct {
	m *Metrics
}

// ProxyObserver returns the observer to set as proxy.Options.Observer.
func (m *Metrics) ProxyObserver() ProxyObserver { return ProxyObserver{m: m} }

// ObserveRequest counts one conversation API request by route label (an
// unknown one as "other"), status and duration.
func (o ProxyObserver) ObserveRequest(route string, status int, d time.Duration) {
	if o.m == nil {
		return
	}
	r := bounded(proxyRoutes, route)
	o.m.proxyRequests.WithLabelValues(r, statusCode(status)).Inc()
	o.m.proxyDuration.WithLabelValues(r, statusClass(status)).Observe(d.Seconds())
}

// WebSocketOpened counts a client WebSocket accepted.
func (o ProxyObserver) WebSocketOpened() {
	if o.m == nil {
		return
	}
	o.m.wsOpen.Inc()
}

// WebSocketClosed counts a client WebSocket that ended, with the close
// code sent to the client.
func (o ProxyObserver) WebSocketClosed(code int, _ time.Duration) {
	if o.m == nil {
		return
	}
	o.m.wsOpen.Dec()
	o.m.wsClosed.WithLabelValues(closeCode(code)).Inc()
}
