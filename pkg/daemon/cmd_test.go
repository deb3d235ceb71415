package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// TestServeMCPBudgetFlag: issue 28, the MCP in-flight budget has a flag
// like the other budgets, refused when it is not a limit.
func TestServeMCPBudgetFlag(t *testing.T) {
	for _, v := range []string{"0", "-2"} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"ohd", "serve", "--broker-mcp-in-flight", v}, &out, &errb)
		if code != ExitUsage || !strings.Contains(errb.String(), "--broker-mcp-in-flight "+v) {
			t.Errorf("ohd serve --broker-mcp-in-flight %s = %d %q, want a usage error naming the flag", v, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	Main(context.Background(), []string{"ohd", "serve", "--help"}, &out, &errb)
	if !strings.Contains(out.String()+errb.String(), "--broker-mcp-in-flight") {
		t.Errorf("ohd serve --help does not list --broker-mcp-in-flight")
	}
}

// TestREADMEBrokerConnectionsDefault: the README states the broker's
// default connection limit as it is (issue 28: it said 64, the default is
// 128).
func TestREADMEBrokerConnectionsDefault(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, want := range []string{
		fmt.Sprintf("| `--broker-connections` | %d |", broker.DefaultMaxConns),
		fmt.Sprintf("and %d open connections (flags above)", broker.DefaultMaxConns),
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q: the broker's default connection limit is %d", want, broker.DefaultMaxConns)
		}
	}
}
