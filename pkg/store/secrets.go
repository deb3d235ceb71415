package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxSecretSize bounds a secret value (1 MiB).
const MaxSecretSize = 1 << 20

// ValidName reports whether s may name a secret, LLM profile or OAuth
// server: 1 to 128 characters of [A-Za-z0-9._-], not starting with '.' or
// '-'. Names appear in URLs, audit records and command lines, so nothing
// that needs quoting is allowed.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 128 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

type secretRecord struct {
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretInfo describes a stored secret without its value.
type SecretInfo struct {
	Name      string    `json:"name"`
	Size      int       `json:"size"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SetSecret stores value under name, sealed; it replaces an existing value.
func (s *Store) SetSecret(name string, value []byte) error {
	if !ValidName(name) {
		return fmt.Errorf("set secret %q: invalid name: use 1-128 characters of A-Z a-z 0-9 . _ -", name)
	}
	if len(value) > MaxSecretSize {
		return fmt.Errorf("set secret %s: value is %d bytes, the limit is %d", name, len(value), MaxSecretSize)
	}
	now := time.Now().UTC()
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSecrets)
		rec := secretRecord{CreatedAt: now}
		if err := getJSON(b, name, &rec); err != nil && err != ErrNotFound {
			return err
		}
		rec.Sealed = s.key.Seal("secrets|"+name, value)
		rec.UpdatedAt = now
		return putJSON(b, name, &rec)
	})
}

// Secret returns the value of the secret name, or ErrNotFound.
func (s *Store) Secret(name string) ([]byte, error) {
	var rec secretRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketSecrets), name, &rec)
	})
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	v, err := s.key.Open("secrets|"+name, rec.Sealed)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return v, nil
}

// Secrets lists the stored secrets by name, without values.
func (s *Store) Secrets() ([]SecretInfo, error) {
	var out []SecretInfo
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSecrets).ForEach(func(k, _ []byte) error {
			var rec secretRecord
			if err := getJSON(tx.Bucket(bucketSecrets), string(k), &rec); err != nil {
				return err
			}
			size := len(rec.Sealed) - 1 - 12 - 16 // version, nonce, tag
			out = append(out, SecretInfo{Name: string(k), Size: max(size, 0), CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt})
			return nil
		})
	})
	return out, err
}

// DeleteSecret removes the secret name, or returns ErrNotFound.
func (s *Store) DeleteSecret(name string) error {
	return deleteKey(s.db, bucketSecrets, "secret", name)
}

func deleteKey(db *bolt.DB, bucket []byte, what, name string) error {
	return db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get([]byte(name)) == nil {
			return fmt.Errorf("%s %s: %w", what, name, ErrNotFound)
		}
		return b.Delete([]byte(name))
	})
}

// GitCredential says which credential the broker answers for a git host:
// a username and the name of the secret holding the password or token.
type GitCredential struct {
	Host     string `json:"host"`
	Username string `json:"username"`
	Secret   string `json:"secret"`
	// Scheme is how the broker's git relay reaches the host: "" or
	// "https"; "http" only for a loopback host (a test server).
	Scheme string `json:"scheme,omitempty"`
	// Auth is how the relay sends the credential: "" or "basic"
	// (username and secret), "bearer" (the secret as a bearer token).
	Auth string `json:"auth,omitempty"`
}

// LLMProfile is an LLM provider configuration. The API key is the secret
// named KeySecret; it is disclosed to a conversation only when
// AllowDisclosure is set, and otherwise only injected by the broker's proxy.
type LLMProfile struct {
	Name            string `json:"name"`
	Model           string `json:"model"`
	BaseURL         string `json:"base_url"`
	KeySecret       string `json:"key_secret"`
	AuthHeader      string `json:"auth_header,omitempty"`
	AllowDisclosure bool   `json:"allow_disclosure,omitempty"`
}

// MCPServer is a remote MCP server (streamable HTTP) that the broker
// reaches for a conversation with credential headers injected: URL is the
// server's own endpoint, which stays on the host, and each header's value
// is the secret it names.
type MCPServer struct {
	Name    string      `json:"name"`
	URL     string      `json:"url"`
	Headers []MCPHeader `json:"headers"`
}

// MCPHeader is a header the broker sets on every request to an MCP
// server: Name as sent, the value the secret named Secret.
type MCPHeader struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// OAuthServer is an OAuth token endpoint whose tokens the broker refreshes
// on the host. Tokens are sealed at rest; ClientSecret names a secret.
type OAuthServer struct {
	Name         string    `json:"name"`
	TokenURL     string    `json:"token_url"`
	ClientID     string    `json:"client_id"`
	ClientSecret string    `json:"client_secret,omitempty"`
	Expiry       time.Time `json:"expiry"`
	// Access and Refresh are the sealed tokens; use OAuthTokens to read
	// them and SetOAuthTokens to write them.
	Access  []byte `json:"access,omitempty"`
	Refresh []byte `json:"refresh,omitempty"`
}

// PutGitCredential creates or replaces the credential for c.Host.
func (s *Store) PutGitCredential(c GitCredential) error {
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketGitCreds), c.Host, &c) })
}

// GitCredential returns the credential configured for host.
func (s *Store) GitCredential(host string) (GitCredential, error) {
	var c GitCredential
	err := s.db.View(func(tx *bolt.Tx) error { return getJSON(tx.Bucket(bucketGitCreds), host, &c) })
	if err != nil {
		return c, fmt.Errorf("git credential %s: %w", host, err)
	}
	return c, nil
}

// GitCredentials lists the configured git credentials.
func (s *Store) GitCredentials() ([]GitCredential, error) {
	return listJSON[GitCredential](s.db, bucketGitCreds)
}

// DeleteGitCredential removes the credential of host.
func (s *Store) DeleteGitCredential(host string) error {
	return deleteKey(s.db, bucketGitCreds, "git credential", host)
}

// PutLLMProfile creates or replaces the profile p.Name.
func (s *Store) PutLLMProfile(p LLMProfile) error {
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketLLM), p.Name, &p) })
}

// LLMProfile returns the profile name.
func (s *Store) LLMProfile(name string) (LLMProfile, error) {
	var p LLMProfile
	err := s.db.View(func(tx *bolt.Tx) error { return getJSON(tx.Bucket(bucketLLM), name, &p) })
	if err != nil {
		return p, fmt.Errorf("llm profile %s: %w", name, err)
	}
	return p, nil
}

// LLMProfiles lists the profiles.
func (s *Store) LLMProfiles() ([]LLMProfile, error) { return listJSON[LLMProfile](s.db, bucketLLM) }

// DeleteLLMProfile removes the profile name.
func (s *Store) DeleteLLMProfile(name string) error {
	return deleteKey(s.db, bucketLLM, "llm profile", name)
}

// PutMCPServer creates or replaces the MCP server m.Name.
func (s *Store) PutMCPServer(m MCPServer) error {
	if !ValidName(m.Name) {
		return fmt.Errorf("put mcp server %q: invalid name: use 1-128 characters of A-Z a-z 0-9 . _ -", m.Name)
	}
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketMCP), m.Name, &m) })
}

// MCPServer returns the MCP server name.
func (s *Store) MCPServer(name string) (MCPServer, error) {
	var m MCPServer
	err := s.db.View(func(tx *bolt.Tx) error { return getJSON(tx.Bucket(bucketMCP), name, &m) })
	if err != nil {
		return m, fmt.Errorf("mcp server %s: %w", name, err)
	}
	return m, nil
}

// MCPServers lists the MCP servers.
func (s *Store) MCPServers() ([]MCPServer, error) { return listJSON[MCPServer](s.db, bucketMCP) }

// DeleteMCPServer removes the MCP server name (not its header secrets).
func (s *Store) DeleteMCPServer(name string) error {
	return deleteKey(s.db, bucketMCP, "mcp server", name)
}

// PutOAuthServer creates or replaces the server o.Name's configuration,
// keeping its stored tokens unless refresh is non-nil, in which case the
// refresh token is replaced and the access token dropped.
func (s *Store) PutOAuthServer(o OAuthServer, refresh []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOAuth)
		var old OAuthServer
		if err := getJSON(b, o.Name, &old); err == nil {
			o.Access, o.Refresh, o.Expiry = old.Access, old.Refresh, old.Expiry
		}
		if refresh != nil {
			o.Refresh = s.key.Seal("oauth_servers|"+o.Name+"|refresh", refresh)
			o.Access, o.Expiry = nil, time.Time{}
		}
		return putJSON(b, o.Name, &o)
	})
}

// OAuthServer returns the configuration of name (tokens still sealed).
func (s *Store) OAuthServer(name string) (OAuthServer, error) {
	var o OAuthServer
	err := s.db.View(func(tx *bolt.Tx) error { return getJSON(tx.Bucket(bucketOAuth), name, &o) })
	if err != nil {
		return o, fmt.Errorf("oauth server %s: %w", name, err)
	}
	return o, nil
}

// OAuthTokens opens the sealed tokens of o (nil when absent).
func (s *Store) OAuthTokens(o OAuthServer) (access, refresh []byte, err error) {
	if o.Access != nil {
		if access, err = s.key.Open("oauth_servers|"+o.Name+"|access", o.Access); err != nil {
			return nil, nil, fmt.Errorf("oauth server %s: access token: %w", o.Name, err)
		}
	}
	if o.Refresh != nil {
		if refresh, err = s.key.Open("oauth_servers|"+o.Name+"|refresh", o.Refresh); err != nil {
			return nil, nil, fmt.Errorf("oauth server %s: refresh token: %w", o.Name, err)
		}
	}
	return access, refresh, nil
}

// SetOAuthTokens stores fresh tokens for name after a refresh; a nil
// refresh keeps the old refresh token.
func (s *Store) SetOAuthTokens(name string, access, refresh []byte, expiry time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketOAuth)
		var o OAuthServer
		if err := getJSON(b, name, &o); err != nil {
			return fmt.Errorf("oauth server %s: %w", name, err)
		}
		o.Access = s.key.Seal("oauth_servers|"+name+"|access", access)
		if refresh != nil {
			o.Refresh = s.key.Seal("oauth_servers|"+name+"|refresh", refresh)
		}
		o.Expiry = expiry
		return putJSON(b, name, &o)
	})
}

// OAuthServers lists the servers (tokens still sealed).
func (s *Store) OAuthServers() ([]OAuthServer, error) {
	return listJSON[OAuthServer](s.db, bucketOAuth)
}

// DeleteOAuthServer removes the server name and its tokens.
func (s *Store) DeleteOAuthServer(name string) error {
	return deleteKey(s.db, bucketOAuth, "oauth server", name)
}

func listJSON[T any](db *bolt.DB, bucket []byte) ([]T, error) {
	var out []T
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		return b.ForEach(func(k, _ []byte) error {
			var v T
			if err := getJSON(b, string(k), &v); err != nil {
				return err
			}
			out = append(out, v)
			return nil
		})
	})
	return out, err // bbolt iterates in key order: sorted by name
}

// DeleteScoped removes the secrets, LLM profiles and MCP servers of
// conversation id:
// those named "<id>.<name>", which ohd creates from what a client sent
// for that conversation (secret mediation). It reports how many it
// removed; none is not an error.
func (s *Store) DeleteScoped(id string) (int, error) {
	if !ValidID(id) {
		return 0, fmt.Errorf("delete secrets of conversation %q: not a conversation id", id)
	}
	prefix := []byte(id + ".")
	// Most conversations have none: a read finds that without the write
	// transaction's sync (one on the way of every removal).
	found := false
	if err := s.db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketSecrets, bucketLLM, bucketMCP} {
			if k, _ := tx.Bucket(name).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
				found = true
			}
		}
		return nil
	}); err != nil || !found {
		return 0, err
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketSecrets, bucketLLM, bucketMCP} {
			c := tx.Bucket(name).Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, err
}

// CopyScoped gives conversation to a copy of conversation from's own
// secrets, LLM profiles and MCP servers (those named "<from>.<name>",
// which secret mediation made of what a client sent for it), each under
// "<to>.<name>": a fork takes its parent's credentials (DESIGN §7). A
// secret is opened and sealed again under its new name inside the store,
// its plaintext cleared at once; it never leaves the store in clear. A
// profile's or server's references to from's secrets are renamed too.
// It returns the grants, in to's names, of what was copied that from had
// been granted (grants); from's other grants (the operator's, by their
// own names) are returned as they are. Copying onto names that exist
// fails and copies nothing.
func (s *Store) CopyScoped(from, to string, grants Grants) (Grants, error) {
	if !ValidID(from) || !ValidID(to) || from == to {
		return Grants{}, fmt.Errorf("copy credentials of conversation %q to %q: not two conversation ids", from, to)
	}
	prefix := []byte(from + ".")
	rename := func(name string) string {
		if rest, ok := strings.CutPrefix(name, from+"."); ok {
			return to + "." + rest
		}
		return name
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		put := func(b *bolt.Bucket, name string, v []byte) error {
			if b.Get([]byte(name)) != nil {
				return fmt.Errorf("%s: %w", name, ErrExists)
			}
			return b.Put([]byte(name), v)
		}
		type kv struct{ k, v []byte }
		scoped := func(bucket []byte) []kv {
			var out []kv
			c := tx.Bucket(bucket).Cursor()
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				out = append(out, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
			}
			return out
		}
		sb := tx.Bucket(bucketSecrets)
		for _, e := range scoped(bucketSecrets) {
			var rec secretRecord
			if err := json.Unmarshal(e.v, &rec); err != nil {
				return fmt.Errorf("secret %s: %w", e.k, err)
			}
			plain, err := s.key.Open("secrets|"+string(e.k), rec.Sealed)
			if err != nil {
				return fmt.Errorf("secret %s: %w", e.k, err)
			}
			name := rename(string(e.k))
			rec.Sealed = s.key.Seal("secrets|"+name, plain)
			clear(plain)
			rec.CreatedAt, rec.UpdatedAt = time.Now().UTC(), time.Now().UTC()
			data, err := json.Marshal(&rec)
			if err != nil {
				return err
			}
			if err := put(sb, name, data); err != nil {
				return err
			}
		}
		lb := tx.Bucket(bucketLLM)
		for _, e := range scoped(bucketLLM) {
			var p LLMProfile
			if err := json.Unmarshal(e.v, &p); err != nil {
				return fmt.Errorf("llm profile %s: %w", e.k, err)
			}
			p.Name, p.KeySecret = rename(p.Name), rename(p.KeySecret)
			data, err := json.Marshal(&p)
			if err != nil {
				return err
			}
			if err := put(lb, p.Name, data); err != nil {
				return err
			}
		}
		mb := tx.Bucket(bucketMCP)
		for _, e := range scoped(bucketMCP) {
			var m MCPServer
			if err := json.Unmarshal(e.v, &m); err != nil {
				return fmt.Errorf("mcp server %s: %w", e.k, err)
			}
			m.Name = rename(m.Name)
			for i := range m.Headers {
				m.Headers[i].Secret = rename(m.Headers[i].Secret)
			}
			data, err := json.Marshal(&m)
			if err != nil {
				return err
			}
			if err := put(mb, m.Name, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Grants{}, fmt.Errorf("copy credentials of conversation %s to %s: %w", from, to, err)
	}
	var g Grants
	for _, kind := range Kinds {
		for _, name := range *grants.List(kind) {
			g.Add(kind, rename(name))
		}
	}
	for name, opt := range grants.GitOptions {
		g.SetGitOptions(rename(name), opt)
	}
	return g, nil
}
