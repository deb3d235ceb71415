package daemon

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/pkg/runtime"
)

// TestTTYInput: an exec's terminal input is split into the bytes typed,
// in order, and the window sizes, each when it comes.
func TestTTYInput(t *testing.T) {
	in := strings.Join([]string{
		`{"data":"aGVs"}`,                 // "hel"
		`{"size":{"rows":40,"cols":100}}`, //
		`{"data":"bG8K"}`,                 // "lo\n"
		`{"size":{"rows":41,"cols":101}}`, //
		`{"data":"AwQ="}`,                 // ^C ^D: bytes, not signals
	}, "\n")
	data, sizes, stop := ttyInput(strings.NewReader(in))
	defer stop()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(data)
		got <- b
	}()
	var gotSizes []runtime.TermSize
	for range 2 {
		gotSizes = append(gotSizes, <-sizes)
	}
	if diff := cmp.Diff([]runtime.TermSize{{Rows: 40, Cols: 100}, {Rows: 41, Cols: 101}}, gotSizes); diff != "" {
		t.Errorf("sizes (-want +got):\n%s", diff)
	}
	if b := <-got; string(b) != "hello\n\x03\x04" {
		t.Errorf("data = %q, want %q", b, "hello\n\x03\x04")
	}
}
