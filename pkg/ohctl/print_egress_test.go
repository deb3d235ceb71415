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
