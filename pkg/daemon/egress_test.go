package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// probeRuntime is a docker-kind runtime whose namespaces can or cannot be
// entered (only Kind and ProbeNetns are called).
type probeRuntime struct {
	runtime.Runtime
	err error
}

func (probeRuntime) Kind() string        { return "docker" }
func (p probeRuntime) ProbeNetns() error { return p.err }

func TestSelectEgress(t *testing.T) {
	noNetns := fmt.Errorf("%w: the engine runs in Docker Desktop's virtual machine", runtime.ErrNetnsUnavailable)
	for _, tc := range []struct {
		flag       string
		probe      error
		want, warn string
		err        bool
	}{
		{"auto", nil, "broker", "", false},
		{"auto", noNetns, "open", "cannot enter", false},
		{"broker", nil, "broker", "", false},
		{"broker", noNetns, "", "", true},
		{"open", nil, "open", "", false},
	} {
		var logs bytes.Buffer
		d := &Daemon{cfg: Config{Egress: tc.flag}, log: slog.New(slog.NewTextHandler(&logs, nil)), rt: probeRuntime{err: tc.probe}}
		got, err := d.selectEgress()
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("--egress %s, probe %v: selectEgress() = %q, %v; want %q (error %v)", tc.flag, tc.probe, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, runtime.ErrNetnsUnavailable) {
			t.Errorf("--egress %s: error %v does not say why", tc.flag, err)
		}
		if tc.warn != "" && !strings.Contains(logs.String(), tc.warn) {
			t.Errorf("--egress %s: no warning, log %q", tc.flag, logs.String())
		}
	}
}
