package ohctl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/pkg/store"
)

func TestPrintAuditEgress(t *testing.T) {
	var b bytes.Buffer
	printAudit(&b, []store.AuditRecord{
		{Time: time.Unix(0, 0), Source: "broker", Conversation: "c", Route: "GET /v1/egress/{dest}", Kind: "net",
			Name: "example.com:443", Allowed: true, Addr: "93.184.216.34:443", BytesOut: 10, BytesIn: 20, DurationMS: 5},
		{Time: time.Unix(0, 0), Source: "broker", Conversation: "c", Route: "GET /v1/egress/{dest}", Kind: "net",
			Name: "localhost:80", Code: "not_granted", Reason: "loopback"},
	})
	for _, want := range []string{"allowed via 93.184.216.34:443, 10 B out, 20 B in, 5 ms", "refused (loopback)", "example.com:443"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ohctl audit output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestPrintUpgradedEgress: issue 28. A container conversation recorded
// before ohd recorded its egress mode keeps the engine's open network:
// ohctl show says so, and what to do, instead of showing nothing.
func TestPrintUpgradedEgress(t *testing.T) {
	for _, tc := range []struct {
		c    store.Conversation
		want string
	}{
		{store.Conversation{ID: "a", Runtime: "docker"}, "open (made by an earlier ohd"},
		{store.Conversation{ID: "b", Runtime: "docker", Egress: store.EgressBroker}, "egress         broker\n"},
		{store.Conversation{ID: "c", Runtime: "docker", Egress: store.EgressOpen}, "egress         open\n"},
	} {
		var b bytes.Buffer
		printConversation(&b, tc.c, time.Unix(0, 0))
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("ohctl show of %+v lacks %q:\n%s", tc.c, tc.want, b.String())
		}
	}
	var b bytes.Buffer
	printConversation(&b, store.Conversation{ID: "d", Runtime: "local"}, time.Unix(0, 0))
	if strings.Contains(b.String(), "egress") {
		t.Errorf("ohctl show of a local conversation shows an egress:\n%s", b.String())
	}
}
