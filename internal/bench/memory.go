package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/store"
)

// MemoryOptions configure Memory. Zero fields take their defaults.
type MemoryOptions struct {
	// Image is the conversations' image (the test image).
	Image string
	// Live is the number of conversations running at once; default 50.
	Live int
	// Settle is how long the daemon is left alone before each reading
	// (its collector runs, its caches fill); default 3s.
	Settle time.Duration
}

// MemoryResult is what the daemon holds per live conversation: `ohd
// serve` as its own process with the docker runtime, its resident memory
// with one conversation running and with Live, each created through its
// API and asked for through it once.
type MemoryResult struct {
	Live int
	// One and All are the daemon's resident set (VmRSS) with one
	// conversation and with Live.
	One, All int64
	// PerConversation is (All-One)/(Live-1).
	PerConversation int64
}

// Line is the one-line summary the harness prints:
//
//	bench: memory-per-conversation kib=<per conversation> live=<n> rss=<all>
func (r MemoryResult) Line() string {
	return fmt.Sprintf("bench: memory-per-conversation kib=%d live=%d rss_kib=%d", r.PerConversation>>10, r.Live, r.All>>10)
}

// Detail is the readings.
func (r MemoryResult) Detail() string {
	return fmt.Sprintf("memory: ohd serve's resident set %d KiB with 1 live conversation, %d KiB with %d: %d KiB per conversation",
		r.One>>10, r.All>>10, r.Live, r.PerConversation>>10)
}

// MemoryRows is the table row of Memory's result (no baseline: the figure
// is compared with the last run's by hand).
func MemoryRows(r MemoryResult) []Row {
	return []Row{{Name: "memory-per-conversation", OHD: fmt.Sprintf("%d KiB at %d live", r.PerConversation>>10, r.Live), Ratio: math.NaN()}}
}

// Memory measures the daemon's memory per live conversation (see
// MemoryResult). Every conversation it creates is removed on return.
func Memory(ctx context.Context, opts MemoryOptions) (_ MemoryResult, err error) {
	if opts.Live <= 1 {
		opts.Live = 50
	}
	if opts.Settle <= 0 {
		opts.Settle = 3 * time.Second
	}
	res := MemoryResult{Live: opts.Live}
	d, err := startOHD(ctx, opts.Image)
	if err != nil {
		return res, err
	}
	defer d.stop()
	var ids []string
	defer func() {
		// startOHD's conversation goes with d.stop; these here.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		for _, id := range ids {
			if a, rerr := d.api(cctx, http.MethodDelete, "/api/conversations/"+id, nil); rerr != nil || a.status >= 300 {
				if err == nil {
					err = fmt.Errorf("bench memory: remove %s: %v %d %s", id, rerr, a.status, a.body)
				}
			}
		}
	}()
	// Each conversation is asked for once, the first too.
	touch := func(id string) error {
		a, err := d.api(ctx, http.MethodGet, "/api/conversations/"+id, nil)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK {
			return fmt.Errorf("bench memory: GET conversation %s: %d %s", id, a.status, a.body)
		}
		return nil
	}
	if err := touch(proxyBenchID); err != nil {
		return res, err
	}
	settle := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(opts.Settle):
			return nil
		}
	}
	if err := settle(); err != nil {
		return res, err
	}
	if res.One, err = residentSet(d.cmd.Process.Pid); err != nil {
		return res, err
	}
	ws := filepath.Join(d.dir, "workspace")
	for i := 1; i < opts.Live; i++ {
		id := store.NewID()
		body, _ := json.Marshal(map[string]any{"conversation_id": id, "workspace": map[string]any{"working_dir": ws}})
		a, err := d.api(ctx, http.MethodPost, "/api/conversations", body)
		if err != nil {
			return res, err
		}
		if a.status != http.StatusCreated {
			return res, fmt.Errorf("bench memory: create conversation %d of %d: %d %s", i+1, opts.Live, a.status, a.body)
		}
		ids = append(ids, id)
		if err := touch(id); err != nil {
			return res, err
		}
	}
	if err := settle(); err != nil {
		return res, err
	}
	if res.All, err = residentSet(d.cmd.Process.Pid); err != nil {
		return res, err
	}
	res.PerConversation = (res.All - res.One) / int64(opts.Live-1)
	return res, nil
}

// residentSet is process pid's resident set size in bytes (VmRSS).
func residentSet(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("bench memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n << 10, nil
				}
			}
		}
	}
	return 0, errors.New("bench memory: no VmRSS in /proc/<pid>/status")
}
