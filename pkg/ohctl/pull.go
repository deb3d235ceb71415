package ohctl

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/control"
)

// How ohctl shows an image pull while a create waits for it: it asks the
// daemon (GET /v1/pulls) every pullPollEvery and prints a line on
// standard error when the pull's state changes: at once for a new layer,
// a layer done or a new status of the image, at most every pullLineEvery
// for bytes alone.
const (
	pullPollEvery = 500 * time.Millisecond
	pullLineEvery = 5 * time.Second
)

// whilePulling runs fn and, while it runs, prints the progress of the
// image pulls the daemon is waiting for (only the conversation image is
// ever pulled, so a pull in progress is the one a create waits for). A
// daemon that cannot say (one without /v1/pulls) is not asked again.
func (s *state) whilePulling(ctx context.Context, fn func(context.Context) error) error {
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.showPulls(pctx)
	}()
	err := fn(ctx)
	stop()
	wg.Wait()
	return err
}

func (s *state) showPulls(ctx context.Context) {
	type shown struct {
		line, key string
		at        time.Time
	}
	last := map[string]shown{}
	c := s.client()
	tick := time.NewTicker(pullPollEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pulls, err := c.Pulls(qctx)
		cancel()
		if err != nil {
			return
		}
		for _, p := range pulls {
			line, key := pullLine(p)
			prev, seen := last[p.Image]
			now := s.env.Now()
			if line == prev.line || (seen && key == prev.key && now.Sub(prev.at) < pullLineEvery) {
				continue
			}
			if ctx.Err() != nil {
				return // the create answered: its own output follows
			}
			if !seen {
				fmt.Fprintf(s.env.Stderr, "ohctl: the Docker engine does not have image %s: ohd is pulling it, the create waits\n", p.Image)
			}
			fmt.Fprintf(s.env.Stderr, "ohctl: %s\n", line)
			last[p.Image] = shown{line: line, key: key, at: now}
		}
	}
}

// pullLine is the line shown for a pull, and the key of its state that
// prints at once when it changes (layers, layers done, status).
func pullLine(p control.Pull) (line, key string) {
	done := 0
	for _, l := range p.Layers {
		if l.Done {
			done++
		}
	}
	line = fmt.Sprintf("pulling %s: %s", p.Image, p.Summary())
	if p.Status != "" && len(p.Layers) > 0 {
		line += " [" + p.Status + "]"
	}
	return line, strings.Join([]string{p.Image, p.Status, fmt.Sprint(len(p.Layers)), fmt.Sprint(done)}, "\x00")
}
