package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLease: a conversation whose lease another live owner holds is not
// served (404, as conversation_service.py skips it) until that owner is
// found dead on this same host, or the lease expires; with TTL 0 there is
// no lease; a graceful shutdown releases it.
func TestLease(t *testing.T) {
	host, _ := os.Hostname()
	dir := t.TempDir()
	id := "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	first := newTestServer(t, Config{ConversationsPath: dir, LeaseTTL: 45 * time.Second})
	first.create(t, t.TempDir(), id)
	leasePath := filepath.Join(dir, "6f9619ff8b86d011b42d00c04fc964ff", leaseFile)
	var p leasePayload
	raw, err := os.ReadFile(leasePath)
	if err != nil || json.Unmarshal(raw, &p) != nil || p.OwnerHost != host || p.OwnerPID == nil || *p.OwnerPID != os.Getpid() || p.Generation != 1 {
		t.Fatalf("lease after create = %s (%v), want this host and pid, generation 1", raw, err)
	}

	// A lease written as the previous container's server wrote it, before
	// it was killed: its pid is gone.
	write := func(host string, pid int, expires time.Time) {
		b, _ := json.Marshal(leasePayload{OwnerInstanceID: "old", Generation: 3, ExpiresAt: float64(expires.Unix()), OwnerHost: host, OwnerPID: &pid})
		if err := os.WriteFile(leasePath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dead := 1 << 22 // above pid_max's default: no such process
	for _, tt := range []struct {
		name   string
		host   string
		pid    int
		expiry time.Duration
		want   int
	}{
		{"another hostname, not expired", "another-host", dead, time.Minute, 404},
		{"this hostname, the owner alive (this process)", host, os.Getpid(), time.Minute, 404},
		{"this hostname, the owner dead", host, dead, time.Minute, 200},
		{"another hostname, expired", "another-host", dead, -time.Second, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			write(tt.host, tt.pid, time.Now().Add(tt.expiry))
			// A new server on the same directory: the container made anew.
			next := newTestServer(t, Config{ConversationsPath: dir, LeaseTTL: 45 * time.Second})
			if status, body := next.do(t, "GET", "/api/conversations/"+id, ""); status != tt.want {
				t.Errorf("GET = %d %s, want %d", status, body, tt.want)
			}
		})
	}

	if err := os.Remove(leasePath); err != nil {
		t.Fatal(err)
	}
	off := newTestServer(t, Config{ConversationsPath: dir})
	if status, _ := off.do(t, "GET", "/api/conversations/"+id, ""); status != 200 {
		t.Errorf("GET with leasing off = %d, want 200", status)
	}
	if _, err := os.Stat(leasePath); !os.IsNotExist(err) {
		t.Errorf("with leasing off a lease was written: %v", err)
	}
}
