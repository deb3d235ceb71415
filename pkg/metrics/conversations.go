package metrics

import "github.com/prometheus/client_golang/prometheus"

var conversationsDesc = prometheus.NewDesc(NameConversations,
	"Conversation records by state, counted from the store at scrape time.",
	[]string{"state"}, nil)

var conversationStateSet = set(conversationStates...)

// conversationCollector asks the daemon for the counts at every scrape,
// so the gauge is the store's truth rather than a running sum of events
// that a missed transition would skew.
type conversationCollector struct {
	count func() map[string]int
}

func (c *conversationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- conversationsDesc }

// Collect reports every known state (zero if absent) and, if the
// callback names a state this package does not know, their sum as
// "other".
func (c *conversationCollector) Collect(ch chan<- prometheus.Metric) {
	byState := make(map[string]int, len(conversationStates)+1)
	for _, s := range conversationStates {
		byState[s] = 0
	}
	for s, n := range c.count() {
		byState[bounded(conversationStateSet, s)] += n
	}
	for s, n := range byState {
		ch <- prometheus.MustNewConstMetric(conversationsDesc, prometheus.GaugeValue, float64(n), s)
	}
}
