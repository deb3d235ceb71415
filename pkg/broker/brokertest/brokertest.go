// Package brokertest provides an in-memory broker.Backend for tests and
// benchmarks of the broker and of code that embeds it.
package brokertest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// Backend is an in-memory broker.Backend. The zero value is not usable:
// call New. Its methods are safe for concurrent use. Values handed in are
// kept as given; values handed out are copies.
type Backend struct {
	mu      sync.RWMutex
	convs   map[string]broker.Conversation
	secrets map[string][]byte
	git     map[string]broker.GitCredential
	llm     map[string]broker.LLMProfile
	mcp     map[string]broker.MCPServer
	oauth   map[string]broker.OAuthServer
	saves   int
	// branches maps "host/repo ref" to the conversation that created it.
	branches map[string]string

	auditMu  sync.Mutex
	audit    []broker.AuditRecord
	discard  bool
	notify   chan struct{}
	auditErr error
}

// New returns an empty Backend that keeps every audit record.
func New() *Backend {
	return &Backend{
		convs:    make(map[string]broker.Conversation),
		secrets:  make(map[string][]byte),
		git:      make(map[string]broker.GitCredential),
		llm:      make(map[string]broker.LLMProfile),
		mcp:      make(map[string]broker.MCPServer),
		oauth:    make(map[string]broker.OAuthServer),
		branches: make(map[string]string),
		notify:   make(chan struct{}),
	}
}

// DiscardAudit makes Audit drop records (benchmarks).
func (b *Backend) DiscardAudit() {
	b.auditMu.Lock()
	b.discard = true
	b.auditMu.Unlock()
}

// SetConversation adds or replaces a conversation.
func (b *Backend) SetConversation(c broker.Conversation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.convs[c.ID] = c
}

// EndConversation removes a conversation (Conversation then returns
// ErrNotFound).
func (b *Backend) EndConversation(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.convs, id)
}

// SetSecret stores a secret.
func (b *Backend) SetSecret(name string, value []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.secrets[name] = value
}

// SetGitCredential stores the credential of host.
func (b *Backend) SetGitCredential(host string, c broker.GitCredential) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.git[host] = c
}

// SetLLMProfile stores a profile.
func (b *Backend) SetLLMProfile(p broker.LLMProfile) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.llm[p.Name] = p
}

// SetMCPServer stores an MCP server.
func (b *Backend) SetMCPServer(m broker.MCPServer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mcp[m.Name] = m
}

// SetOAuthServer stores a server.
func (b *Backend) SetOAuthServer(s broker.OAuthServer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.oauth[s.Name] = s
}

// OAuthSaves returns how many times SaveOAuthTokens was called.
func (b *Backend) OAuthSaves() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.saves
}

// Conversation implements broker.Backend.
func (b *Backend) Conversation(_ context.Context, id string) (broker.Conversation, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	c, ok := b.convs[id]
	if !ok {
		return broker.Conversation{}, broker.ErrNotFound
	}
	return c, nil
}

// Secret implements broker.Backend.
func (b *Backend) Secret(_ context.Context, name string) ([]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v, ok := b.secrets[name]
	if !ok {
		return nil, broker.ErrNotFound
	}
	return slices.Clone(v), nil
}

// GitCredential implements broker.Backend.
func (b *Backend) GitCredential(_ context.Context, host string) (broker.GitCredential, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	c, ok := b.git[host]
	if !ok {
		return broker.GitCredential{}, broker.ErrNotFound
	}
	c.Password = slices.Clone(c.Password)
	return c, nil
}

// LLMProfile implements broker.Backend.
func (b *Backend) LLMProfile(_ context.Context, name string) (broker.LLMProfile, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	p, ok := b.llm[name]
	if !ok {
		return broker.LLMProfile{}, broker.ErrNotFound
	}
	p.APIKey = slices.Clone(p.APIKey)
	return p, nil
}

// MCPServer implements broker.Backend.
func (b *Backend) MCPServer(_ context.Context, name string) (broker.MCPServer, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	m, ok := b.mcp[name]
	if !ok {
		return broker.MCPServer{}, broker.ErrNotFound
	}
	hs := make([]broker.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = broker.Header{Name: h.Name, Value: slices.Clone(h.Value)}
	}
	m.Headers = hs
	return m, nil
}

// OAuthServer implements broker.Backend.
func (b *Backend) OAuthServer(_ context.Context, name string) (broker.OAuthServer, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, ok := b.oauth[name]
	if !ok {
		return broker.OAuthServer{}, broker.ErrNotFound
	}
	s.AccessToken = slices.Clone(s.AccessToken)
	s.RefreshToken = slices.Clone(s.RefreshToken)
	s.ClientSecret = slices.Clone(s.ClientSecret)
	return s, nil
}

// SaveOAuthTokens implements broker.Backend.
func (b *Backend) SaveOAuthTokens(_ context.Context, name string, access, refresh []byte, expiry time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.oauth[name]
	if !ok {
		return broker.ErrNotFound
	}
	s.AccessToken, s.RefreshToken, s.Expiry = slices.Clone(access), slices.Clone(refresh), expiry
	b.oauth[name] = s
	b.saves++
	return nil
}

// GitBranchCreators implements broker.Backend.
func (b *Backend) GitBranchCreators(_ context.Context, host, repo string, refs []string) (map[string]string, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := map[string]string{}
	for _, ref := range refs {
		if id, ok := b.branches[host+"/"+repo+" "+ref]; ok {
			out[ref] = id
		}
	}
	return out, nil
}

// RecordGitBranches implements broker.Backend.
func (b *Backend) RecordGitBranches(_ context.Context, id, host, repo string, refs []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ref := range refs {
		b.branches[host+"/"+repo+" "+ref] = id
	}
	return nil
}

// GitBranches returns the recorded creations, "host/repo ref" to the
// conversation's id.
func (b *Backend) GitBranches() map[string]string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return maps.Clone(b.branches)
}

// SetAuditErr makes AuditErr return err (nil: audit works again), as a
// store whose disk is full would.
func (b *Backend) SetAuditErr(err error) {
	b.auditMu.Lock()
	defer b.auditMu.Unlock()
	b.auditErr = err
}

// AuditErr implements broker.Backend.
func (b *Backend) AuditErr() error {
	b.auditMu.Lock()
	defer b.auditMu.Unlock()
	return b.auditErr
}

// Audit implements broker.Backend: it appends the record.
func (b *Backend) Audit(rec broker.AuditRecord) {
	b.auditMu.Lock()
	defer b.auditMu.Unlock()
	if b.discard {
		return
	}
	b.audit = append(b.audit, rec)
	close(b.notify)
	b.notify = make(chan struct{})
}

// AuditRecords returns the records so far.
func (b *Backend) AuditRecords() []broker.AuditRecord {
	b.auditMu.Lock()
	defer b.auditMu.Unlock()
	return slices.Clone(b.audit)
}

// WaitAudit waits until there are at least n records or ctx ends, and
// returns the records.
func (b *Backend) WaitAudit(ctx context.Context, n int) ([]broker.AuditRecord, error) {
	for {
		b.auditMu.Lock()
		if len(b.audit) >= n {
			recs := slices.Clone(b.audit)
			b.auditMu.Unlock()
			return recs, nil
		}
		ch := b.notify
		b.auditMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return b.AuditRecords(), ctx.Err()
		}
	}
}
