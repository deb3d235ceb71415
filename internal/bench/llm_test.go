package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testimage"
)

// TestLLMShort runs the LLM benchmark with short streams: both styles
// reach the provider with the key injected, the streams arrive event by
// event, and git credential requests during them succeed.
func TestLLMShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := LLM(ctx, LLMOptions{Stream: 3 * time.Second, Rounds: 3, Prompt: 64 << 10, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Style != "openai" || res[1].Style != "anthropic" {
		t.Fatalf("results %+v, want openai and anthropic", res)
	}
	for _, r := range res {
		if r.RelayTTFB <= 0 || r.DirectTTFB <= 0 {
			t.Errorf("%s: TTFB relay %v direct %v", r.Style, r.RelayTTFB, r.DirectTTFB)
		}
		if r.StreamEvents < 3 || r.StreamMaxGap >= 2500*time.Millisecond {
			t.Errorf("%s: stream of %d events, longest gap %v: buffered?", r.Style, r.StreamEvents, r.StreamMaxGap)
		}
		if r.GitTotal == 0 || r.GitOK != r.GitTotal {
			t.Errorf("%s: git credential requests during the stream: %d/%d", r.Style, r.GitOK, r.GitTotal)
		}
		if !strings.HasPrefix(r.Line(), "bench: llm-"+r.Style+"-ttfb ") {
			t.Errorf("Line() = %q", r.Line())
		}
	}
	if rows := LLMRows(res); rows[0].Target.Value != 10 || !rows[0].Target.AtMost {
		t.Errorf("row target %+v, want at most 10 (ms)", rows[0].Target)
	}
}

// TestLLMShortContainer measures through a container of the test image
// as make bench does: the inner server makes the calls.
func TestLLMShortContainer(t *testing.T) {
	img := testimage.Ensure(t)
	// The budget includes building ohd and ohctl (-trimpath: not what
	// go test -race has cached), which with the Kubernetes client took
	// over 4 minutes on two cores busy with the other packages' tests.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := LLM(ctx, LLMOptions{Stream: 3 * time.Second, Rounds: 3, Prompt: 1 << 20, Dir: t.TempDir(), Image: img})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || res[2].Style != "openai-container" || res[3].Style != "anthropic-container" {
		t.Fatalf("styles %v", res)
	}
	for _, r := range res[2:] {
		t.Log(r.Detail(), r.Line())
		if r.RelayTTFB <= 0 || r.StreamEvents < 3 || r.StreamMaxGap >= 2500*time.Millisecond {
			t.Errorf("%s: ttfb %v, %d events, longest gap %v", r.Style, r.RelayTTFB, r.StreamEvents, r.StreamMaxGap)
		}
	}
}
