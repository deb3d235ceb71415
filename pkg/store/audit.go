package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// AuditRecord is one audited request: who asked for what and what they got.
// It holds names, never values.
type AuditRecord struct {
	Seq          uint64    `json:"seq"`
	Time         time.Time `json:"time"`
	Source       string    `json:"source"` // "broker", "control", "api"
	Conversation string    `json:"conversation,omitempty"`
	Route        string    `json:"route"`
	Kind         string    `json:"kind,omitempty"`
	Name         string    `json:"name,omitempty"`
	PeerPID      int       `json:"peer_pid,omitempty"`
	PeerUID      int       `json:"peer_uid"`
	Allowed      bool      `json:"allowed"`
	Status       int       `json:"status,omitempty"`
	Code         string    `json:"code,omitempty"`   // the refusal's code, as the client saw it
	Reason       string    `json:"reason,omitempty"` // the precise reason (e.g. stale_epoch, peer_uid)
	Detail       string    `json:"detail,omitempty"` // names the record is about (a push's refs), never values
	// Egress connections (kind net): the address dialled, bytes sent to
	// it and received from it, and how long the connection was open.
	Addr       string `json:"addr,omitempty"`
	BytesOut   int64  `json:"bytes_out,omitempty"`
	BytesIn    int64  `json:"bytes_in,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// AuditFilter selects audit records; zero fields match everything.
type AuditFilter struct {
	Conversation string
	Since        time.Time
	// Limit keeps only the newest Limit records; 0 means all.
	Limit int
}

// AppendAudit writes records synchronously, assigning their Seq.
func (s *Store) AppendAudit(recs ...AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		for i := range recs {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			recs[i].Seq = seq
			data, err := json.Marshal(&recs[i])
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), data); err != nil {
				return err
			}
		}
		return trimAudit(b, s.audit.max)
	})
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// trimAudit drops the oldest records past max. Sequence numbers are
// contiguous, so the count is the distance from the first key to the last
// sequence: no walk of the bucket.
func trimAudit(b *bolt.Bucket, max int) error {
	last := b.Sequence()
	// Re-seek after each delete: a bbolt cursor's Next after Delete skips
	// an item.
	c := b.Cursor()
	for k, _ := c.First(); k != nil && last-binary.BigEndian.Uint64(k)+1 > uint64(max); k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// AuditAsync queues rec for the background writer and returns at once,
// without waking it (the writer runs every interval, or when a batch is
// full): a hand-off that woke a goroutine per record doubled the broker's
// tail latency. A record is never dropped while ohd runs: a batch the
// writer could not commit (a full disk) stays queued and is retried every
// interval. Only past auditQueueMax queued records is a record written
// synchronously, and if that fails too it is counted lost (AuditLost) and
// logged by its names.
func (s *Store) AuditAsync(rec AuditRecord) {
	w := s.audit
	w.mu.Lock()
	if len(w.queue) >= auditQueueMax {
		w.mu.Unlock()
		if err := s.AppendAudit(rec); err != nil {
			w.lost.Add(1)
			s.log.Error("audit record lost: the queue is full and the write failed",
				"conversation", rec.Conversation, "route", rec.Route, "name", rec.Name, "err", err)
		}
		return
	}
	w.queue = append(w.queue, rec)
	n := len(w.queue)
	w.mu.Unlock()
	if n == auditBatch {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// ErrAuditUnavailable is returned by AuditErr while the last attempt to
// write audit records failed: records are queued in memory, not durable.
var ErrAuditUnavailable = errors.New("audit records cannot be written")

// AuditErr returns nil if the last attempt of the writer to commit queued
// audit records succeeded (or none was needed), and otherwise an error
// wrapping ErrAuditUnavailable and the cause (e.g. "no space left on
// device"). It is one atomic load: callers check it on every request, and
// refuse to hand out credentials whose use could not be audited. It clears
// by itself once a retry commits.
func (s *Store) AuditErr() error {
	if p := s.audit.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// AuditLost returns the number of audit records lost since the store was
// opened (see AuditAsync); 0 unless the disk stayed full past
// auditQueueMax queued records.
func (s *Store) AuditLost() uint64 { return s.audit.lost.Load() }

// FlushAudit waits until every record queued before the call is written.
func (s *Store) FlushAudit() {
	done := make(chan struct{})
	s.audit.flush <- done
	<-done
}

// Audit returns the records matching f, oldest first. Queued records are
// flushed first, so a caller sees its own requests.
func (s *Store) Audit(f AuditFilter) ([]AuditRecord, error) {
	s.FlushAudit()
	var out []AuditRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAudit).ForEach(func(_, v []byte) error {
			var r AuditRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			if f.Conversation != "" && r.Conversation != f.Conversation {
				return nil
			}
			if !f.Since.IsZero() && r.Time.Before(f.Since) {
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, err
}

// auditBatch is the queue length at which the writer is woken before its
// interval; auditQueueMax the length past which AuditAsync writes itself.
const (
	auditBatch    = 4096
	auditQueueMax = 1 << 16
)

// auditWriter batches audit records into one transaction per interval.
type auditWriter struct {
	s     *Store
	mu    sync.Mutex
	queue []AuditRecord
	kick  chan struct{} // wakes the writer when a batch is full
	flush chan chan struct{}
	stop  chan struct{}
	done  sync.WaitGroup
	every time.Duration
	max   int
	// failed holds the error of the last failed commit, nil after a
	// successful one (AuditErr).
	failed atomic.Pointer[error]
	lost   atomic.Uint64
}

func newAuditWriter(s *Store, every time.Duration, max int) *auditWriter {
	if every == 0 {
		every = 100 * time.Millisecond
	}
	if max == 0 {
		max = 200000
	}
	w := &auditWriter{
		s: s, kick: make(chan struct{}, 1), flush: make(chan chan struct{}),
		stop: make(chan struct{}), every: every, max: max,
	}
	w.done.Add(1)
	go w.run()
	return w
}

func (w *auditWriter) run() {
	defer w.done.Done()
	t := time.NewTicker(w.every)
	defer t.Stop()
	var spare []AuditRecord
	write := func() {
		w.mu.Lock()
		batch := w.queue
		w.queue = spare[:0]
		w.mu.Unlock()
		if len(batch) == 0 {
			spare = batch
			return
		}
		if err := w.s.AppendAudit(batch...); err != nil {
			// Keep the batch, ahead of what arrived meanwhile, and try
			// again next interval: the records stay in order and none is
			// lost while the disk is full.
			if w.failed.Load() == nil {
				w.s.log.Error("audit write failed; broker requests are refused until it succeeds", "records", len(batch), "err", err)
			}
			err = fmt.Errorf("%w: %w", ErrAuditUnavailable, err)
			w.failed.Store(&err)
			w.mu.Lock()
			w.queue = append(batch, w.queue...)
			w.mu.Unlock()
			spare = nil
			return
		}
		if w.failed.Swap(nil) != nil {
			w.s.log.Info("audit writes succeed again", "records", len(batch))
		}
		clear(batch) // no record stays reachable from the spare
		spare = batch
	}
	for {
		select {
		case <-t.C:
			write()
		case <-w.kick:
			write()
		case done := <-w.flush:
			write()
			close(done)
		case <-w.stop:
			write()
			w.mu.Lock()
			if n := len(w.queue); n > 0 {
				w.lost.Add(uint64(n))
				w.s.log.Error("audit records lost at close: the last write failed", "records", n, "err", w.s.AuditErr())
			}
			w.mu.Unlock()
			return
		}
	}
}

func (w *auditWriter) close() {
	close(w.stop)
	w.done.Wait()
}
