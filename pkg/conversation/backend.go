package conversation

import (
	"context"
	"errors"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/metrics"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Backend is the broker's view of the store: conversations, secrets and
// credential configuration, and the audit log. Conversation reads come
// from the store's in-memory copy, so the broker's hot path does no I/O.
type Backend struct {
	Store *store.Store
	// Metrics counts broker requests by route and result; nil counts
	// nothing.
	Metrics *metrics.Metrics
}

var _ broker.Backend = Backend{}

func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return broker.ErrNotFound
	}
	return err
}

// Conversation returns a live conversation's identity and grants.
func (b Backend) Conversation(_ context.Context, id string) (broker.Conversation, error) {
	c, err := b.Store.Conversation(id)
	if err != nil {
		return broker.Conversation{}, notFound(err)
	}
	if !c.State.Live() {
		return broker.Conversation{}, broker.ErrNotFound
	}
	return brokerConversation(c), nil
}

// Secret returns a secret's value.
func (b Backend) Secret(_ context.Context, name string) ([]byte, error) {
	v, err := b.Store.Secret(name)
	return v, notFound(err)
}

// GitCredential returns the credential configured for host.
func (b Backend) GitCredential(_ context.Context, host string) (broker.GitCredential, error) {
	gc, err := b.Store.GitCredential(host)
	if err != nil {
		return broker.GitCredential{}, notFound(err)
	}
	pw, err := b.Store.Secret(gc.Secret)
	if err != nil {
		return broker.GitCredential{}, notFound(err)
	}
	return broker.GitCredential{Username: gc.Username, Password: pw, Scheme: gc.Scheme, Bearer: gc.Auth == "bearer"}, nil
}

// LLMProfile returns a profile with its API key.
func (b Backend) LLMProfile(_ context.Context, name string) (broker.LLMProfile, error) {
	p, err := b.Store.LLMProfile(name)
	if err != nil {
		return broker.LLMProfile{}, notFound(err)
	}
	key, err := b.Store.Secret(p.KeySecret)
	if err != nil {
		return broker.LLMProfile{}, notFound(err)
	}
	return broker.LLMProfile{
		Name: p.Name, Model: p.Model, BaseURL: p.BaseURL, APIKey: key,
		AllowDisclosure: p.AllowDisclosure, AuthHeader: p.AuthHeader,
	}, nil
}

// MCPServer returns an MCP server with its header values.
func (b Backend) MCPServer(_ context.Context, name string) (broker.MCPServer, error) {
	m, err := b.Store.MCPServer(name)
	if err != nil {
		return broker.MCPServer{}, notFound(err)
	}
	out := broker.MCPServer{Name: m.Name, URL: m.URL}
	for _, h := range m.Headers {
		v, err := b.Store.Secret(h.Secret)
		if err != nil {
			return broker.MCPServer{}, notFound(err)
		}
		out.Headers = append(out.Headers, broker.Header{Name: h.Name, Value: v})
	}
	return out, nil
}

// OAuthServer returns a server's configuration and tokens.
func (b Backend) OAuthServer(_ context.Context, name string) (broker.OAuthServer, error) {
	o, err := b.Store.OAuthServer(name)
	if err != nil {
		return broker.OAuthServer{}, notFound(err)
	}
	access, refresh, err := b.Store.OAuthTokens(o)
	if err != nil {
		return broker.OAuthServer{}, err
	}
	var clientSecret []byte
	if o.ClientSecret != "" {
		if clientSecret, err = b.Store.Secret(o.ClientSecret); err != nil {
			return broker.OAuthServer{}, notFound(err)
		}
	}
	return broker.OAuthServer{
		Name: o.Name, TokenURL: o.TokenURL, ClientID: o.ClientID, ClientSecret: clientSecret,
		RefreshToken: refresh, AccessToken: access, Expiry: o.Expiry,
	}, nil
}

// SaveOAuthTokens stores tokens after a refresh.
func (b Backend) SaveOAuthTokens(_ context.Context, name string, access, refresh []byte, expiry time.Time) error {
	return b.Store.SetOAuthTokens(name, access, refresh, expiry)
}

// GitBranchCreators returns who created which of refs through the relay.
func (b Backend) GitBranchCreators(_ context.Context, host, repo string, refs []string) (map[string]string, error) {
	return b.Store.GitBranchCreators(host, repo, refs)
}

// RecordGitBranches records branches a conversation created through the
// relay.
func (b Backend) RecordGitBranches(_ context.Context, id, host, repo string, refs []string) error {
	return b.Store.RecordGitBranches(id, host, repo, refs)
}

// AuditErr reports whether the store can make audit records durable.
func (b Backend) AuditErr() error { return b.Store.AuditErr() }

// Audit queues a broker audit record.
func (b Backend) Audit(r broker.AuditRecord) {
	b.Metrics.BrokerRequest(r.Route, r.Kind, r.Allowed, r.Code)
	if r.Kind == broker.KindNet {
		b.Metrics.EgressConnection(r.Allowed, r.Reason, r.BytesOut, r.BytesIn)
	}
	b.Store.AuditAsync(store.AuditRecord{
		Time: r.Time, Source: "broker", Conversation: r.Conversation, Route: r.Route, Kind: r.Kind,
		Name: r.Name, PeerPID: r.PeerPID, PeerUID: r.PeerUID, Allowed: r.Allowed, Status: r.Status, Code: r.Code, Reason: r.Reason,
		Detail: r.Detail,
		Addr:   r.Addr, BytesOut: r.BytesOut, BytesIn: r.BytesIn, DurationMS: r.Duration.Milliseconds(),
	})
}
