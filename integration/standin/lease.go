package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The agent server's conversation lease (conversation_lease.py @v1.43.1;
// reference §9). Each conversation directory holds owner_lease.json
// {"owner_instance_id","generation","expires_at","owner_host","owner_pid"}
// (L18, L268-281), written when the server loads the conversation
// (event_service.py L982-990, from _get_or_load_event_service:
// conversation_service.py L1050-1096, at the first request that needs it)
// with expires_at now + lease_ttl_seconds (OH_LEASE_TTL_SECONDS, default 45,
// L20; 0 disables leasing, event_service.py L982-984), owner_host
// socket.gethostname() (L40-44) and owner_pid os.getpid(). A lease of
// another owner that has not expired is taken over only when its owner is
// dead: same owner_host as this host, owner_pid not this process and no
// process with it (os.kill(pid, 0): ESRCH dead, anything else alive;
// L47-68, L166-185). Otherwise the load raises ConversationLeaseHeldError
// and the conversation is skipped (conversation_service.py L1089-1096):
// every route answers 404 and the sockets close 4004 until the lease
// expires. The owner releases (deletes) it when it closes the conversation
// (L203-215), i.e. at a graceful shutdown.
//
// So a container made anew after docker rm -f (no graceful shutdown) with
// another hostname cannot serve its conversation for 45 s; ohd keeps one
// hostname per conversation (runtime.HostnameOf). The stand-in renews a
// lease at each use rather than every 15 s (LEASE_RENEW_INTERVAL_SECONDS):
// only the expiry a second server sees differs.

const leaseFile = "owner_lease.json"

type leasePayload struct {
	OwnerInstanceID string  `json:"owner_instance_id"`
	Generation      int     `json:"generation"`
	ExpiresAt       float64 `json:"expires_at"`
	OwnerHost       string  `json:"owner_host,omitempty"`
	OwnerPID        *int    `json:"owner_pid,omitempty"`
}

// leases is this server's side of the conversation leases.
type leases struct {
	ttl      time.Duration
	instance string // owner_instance_id: uuid4().hex per server
	host     string
	// generation of each conversation directory this server holds.
	held map[string]int
}

func newLeases(ttl time.Duration) *leases {
	host, _ := os.Hostname()
	return &leases{ttl: ttl, instance: strings.ReplaceAll(newUUID(), "-", ""), host: host, held: map[string]int{}}
}

// claim is ConversationLease.claim: it takes or renews the lease of dir,
// or reports false when another live owner holds it.
func (l *leases) claim(dir string) bool {
	now := float64(time.Now().UnixNano()) / 1e9
	generation := 1
	var p leasePayload
	if raw, err := os.ReadFile(filepath.Join(dir, leaseFile)); err == nil && json.Unmarshal(raw, &p) == nil && p.OwnerInstanceID != "" {
		same := p.OwnerInstanceID == l.instance
		if !same && p.ExpiresAt > now && !l.ownerDead(p) {
			return false
		}
		generation = p.Generation
		if !same {
			generation++
		}
	}
	pid := os.Getpid()
	b, _ := json.Marshal(leasePayload{OwnerInstanceID: l.instance, Generation: generation, ExpiresAt: now + l.ttl.Seconds(), OwnerHost: l.host, OwnerPID: &pid})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	tmp := filepath.Join(dir, "owner_lease.tmp")
	if os.WriteFile(tmp, b, 0o644) != nil || os.Rename(tmp, filepath.Join(dir, leaseFile)) != nil {
		return false
	}
	l.held[dir] = generation
	return true
}

// ownerDead is ConversationLease._owner_is_dead.
func (l *leases) ownerDead(p leasePayload) bool {
	if p.OwnerHost == "" || p.OwnerPID == nil || p.OwnerHost != l.host || *p.OwnerPID == os.Getpid() {
		return false
	}
	if *p.OwnerPID <= 0 {
		return true
	}
	return errors.Is(syscall.Kill(*p.OwnerPID, 0), syscall.ESRCH)
}

// releaseAll is ConversationLease.release for every lease this server
// holds: the file is deleted if it is still this owner's generation.
func (l *leases) releaseAll() {
	for dir, gen := range l.held {
		var p leasePayload
		path := filepath.Join(dir, leaseFile)
		if raw, err := os.ReadFile(path); err == nil && json.Unmarshal(raw, &p) == nil && p.OwnerInstanceID == l.instance && p.Generation == gen {
			_ = os.Remove(path)
		}
		delete(l.held, dir)
	}
}
