package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// State is a conversation's lifecycle state.
type State string

// The states of a conversation. A record is written in StateProvisioning
// before any side effect; StateDeleted records are kept for history until
// pruned.
const (
	StateProvisioning State = "provisioning"
	StateRunning      State = "running"
	StateStopped      State = "stopped"
	StateFailed       State = "failed"
	StateDeleted      State = "deleted"
)

// Live reports whether a conversation in state s owns resources (a
// worktree, a socket, maybe a container).
func (s State) Live() bool {
	return s == StateProvisioning || s == StateRunning || s == StateStopped
}

// Grant kinds.
const (
	KindSecret = "secret"
	KindGit    = "git"
	KindLLM    = "llm"
	KindOAuth  = "oauth"
	KindMCP    = "mcp"
	KindNet    = "net"
)

// Kinds lists the grant kinds in display order.
var Kinds = []string{KindSecret, KindGit, KindLLM, KindOAuth, KindMCP, KindNet}

// Grants are the names a conversation may use through its broker, per kind.
// Git entries are "host" or "host/path/prefix".
type Grants struct {
	Secrets []string `json:"secrets,omitempty"`
	Git     []string `json:"git,omitempty"`
	LLM     []string `json:"llm,omitempty"`
	OAuth   []string `json:"oauth,omitempty"`
	MCP     []string `json:"mcp,omitempty"`
	// Net are egress destinations: HOST[:PORT], *.DOMAIN[:PORT], IP:PORT
	// (pkg/egress), stored in canonical form (with the port).
	Net []string `json:"net,omitempty"`
	// GitOptions holds the options of git grants that have any, by the
	// grant's name (an entry of Git).
	GitOptions map[string]GitGrantOptions `json:"git_options,omitempty"`
}

// GitGrantOptions are a git grant's options. The zero value is the
// default: git reaches the host through the broker's relay, which injects
// the credential, and a push may create or update branches under
// refs/heads/openhands/ only.
type GitGrantOptions struct {
	// Push lists ref patterns ("refs/heads/feature/*"; "*" matches any
	// characters, "/" included) a push may create or update besides the
	// default.
	Push []string `json:"push,omitempty"`
	// Helper serves the grant through git's credential helper instead of
	// the relay (ohctl grant ... --git-relay=false): git inside the
	// container then receives the token, and no push policy applies.
	Helper bool `json:"helper,omitempty"`
}

// Merge returns g with every grant of o added.
func (g Grants) Merge(o Grants) Grants {
	g = g.clone()
	for _, kind := range Kinds {
		for _, name := range *o.List(kind) {
			g.Add(kind, name)
		}
	}
	for name, opt := range o.GitOptions {
		g.SetGitOptions(name, opt)
	}
	return g
}

// List returns the slice for kind, or nil for an unknown kind.
func (g *Grants) List(kind string) *[]string {
	switch kind {
	case KindSecret:
		return &g.Secrets
	case KindGit:
		return &g.Git
	case KindLLM:
		return &g.LLM
	case KindOAuth:
		return &g.OAuth
	case KindMCP:
		return &g.MCP
	case KindNet:
		return &g.Net
	}
	return nil
}

// Add grants name of kind; it reports whether anything changed.
func (g *Grants) Add(kind, name string) bool {
	l := g.List(kind)
	if l == nil || slices.Contains(*l, name) {
		return false
	}
	*l = append(*l, name)
	sort.Strings(*l)
	return true
}

// Remove revokes name of kind; it reports whether anything changed.
func (g *Grants) Remove(kind, name string) bool {
	l := g.List(kind)
	if l == nil {
		return false
	}
	i := slices.Index(*l, name)
	if i < 0 {
		return false
	}
	*l = slices.Delete(*l, i, i+1)
	if kind == KindGit {
		delete(g.GitOptions, name)
	}
	return true
}

// SetGitOptions sets the options of git grant name (the zero value
// removes them).
func (g *Grants) SetGitOptions(name string, opt GitGrantOptions) {
	if !opt.Helper && len(opt.Push) == 0 {
		delete(g.GitOptions, name)
		return
	}
	if g.GitOptions == nil {
		g.GitOptions = make(map[string]GitGrantOptions)
	}
	opt.Push = slices.Clone(opt.Push)
	g.GitOptions[name] = opt
}

func (g Grants) clone() Grants {
	return Grants{
		Secrets: slices.Clone(g.Secrets),
		Git:     slices.Clone(g.Git),
		LLM:     slices.Clone(g.LLM),
		OAuth:   slices.Clone(g.OAuth),
		MCP:     slices.Clone(g.MCP),
		GitOptions: func() map[string]GitGrantOptions {
			if g.GitOptions == nil {
				return nil
			}
			m := make(map[string]GitGrantOptions, len(g.GitOptions))
			for k, v := range g.GitOptions {
				v.Push = slices.Clone(v.Push)
				m[k] = v
			}
			return m
		}(),
		Net: slices.Clone(g.Net),
	}
}

// Removal records a requested end of a conversation and, once done, what
// happened to the user's work. It is written before the first teardown step
// so that a crash mid-removal is finished by reconcile.
type Removal struct {
	RequestedAt    time.Time `json:"requested_at"`
	Discard        bool      `json:"discard,omitempty"`
	Done           bool      `json:"done,omitempty"`
	SnapshotRef    string    `json:"snapshot_ref,omitempty"`
	SnapshotCommit string    `json:"snapshot_commit,omitempty"`
	BranchKept     bool      `json:"branch_kept,omitempty"`
	// Kept are the refs of the conversation's git view kept on the host
	// (refs/ohd/kept/<id>/...) because the host lacked their commits.
	Kept []string `json:"kept,omitempty"`
	// IgnoredFiles and IgnoredBytes count the ignored files of the
	// worktree, which were not kept.
	IgnoredFiles int   `json:"ignored_files,omitempty"`
	IgnoredBytes int64 `json:"ignored_bytes,omitempty"`
	// NestedRepos are the worktree's nested repositories the snapshot
	// holds as files (their own history was not kept).
	NestedRepos []string `json:"nested_repos,omitempty"`
	// GitDirsMoved are the git directories the agent made in the user's
	// tree (a .git of its own, an implicit bare repository), relative to
	// the tree, moved out at the removal into GitDirsKept
	// (<state-dir>/kept/<id>/git-dirs), each under the same relative path
	// (package gitboundary).
	GitDirsMoved []string `json:"git_dirs_moved,omitempty"`
	GitDirsKept  string   `json:"git_dirs_kept,omitempty"`
	Message      string   `json:"message,omitempty"`
	// Saved is what the removal's save of the work found (pkg/worktree's
	// RemoveResult, as JSON), recorded once the save succeeded and before
	// anything is torn down. A removal interrupted after it began deleting
	// the worktree is finished with it: nothing is left to save from
	// then, and saving a half-deleted worktree again would record the
	// deletion as the agent's work.
	Saved json.RawMessage `json:"saved,omitempty"`
}

// Conversation is everything ohd knows about one conversation. It never
// holds a secret value: the inner session key is kept sealed apart.
type Conversation struct {
	ID      string `json:"id"`
	State   State  `json:"state"`
	Runtime string `json:"runtime"`
	// Egress is how the conversation's container reaches the network:
	// EgressBroker (no network but loopback; out only through the
	// broker's granted destinations) or EgressOpen (the engine's bridge
	// network); "" for the local runtime and records made before.
	Egress string `json:"egress,omitempty"`

	// Workspace is the canonical host directory the conversation was
	// created for; WorkingDir is where the agent works (the worktree, or
	// the workspace itself when there is no worktree).
	Workspace  string `json:"workspace"`
	WorkingDir string `json:"working_dir"`

	Repo        string `json:"repo,omitempty"`
	CommonDir   string `json:"common_dir,omitempty"`
	Worktree    string `json:"worktree,omitempty"`
	AdminID     string `json:"admin_id,omitempty"`
	Branch      string `json:"branch,omitempty"`
	StartPoint  string `json:"start_point,omitempty"`
	StartCommit string `json:"start_commit,omitempty"`

	// GitLayout is how the container sees the repository: GitLayoutView
	// (its own git view at GitView, mounted at CommonDir's path) or
	// GitLayoutShared (the repository's git dir itself: records written
	// before schema 2, until their container is next started, and
	// local-runtime conversations). "" without a worktree.
	GitLayout string `json:"git_layout,omitempty"`
	GitView   string `json:"git_view,omitempty"`
	// InnerInContainer says the inner server's state is still in the
	// writable layer of the conversation's container (ContainerID), as
	// the releases before schema 3 kept it: it is copied to the host
	// directories before that container is made anew.
	InnerInContainer bool `json:"inner_in_container,omitempty"`
	// InPlace says the agent works in the repository's own folder (Repo,
	// the user's work tree; Worktree is ""), with its own git view over
	// the folder's git dir; ViewBranch is the view's branch (the one the
	// host had checked out) whose commits ohd publishes to Branch.
	InPlace    bool   `json:"in_place,omitempty"`
	ViewBranch string `json:"view_branch,omitempty"`
	// Published is the commit ohd last wrote to the host's branch from the
	// view. PublishConflict says the host branch was moved by someone else
	// (the view's commits are then kept under refs/ohd/kept/<id>/);
	// PublishError is the last publish's failure (a refused object).
	Published       string `json:"published,omitempty"`
	PublishConflict string `json:"publish_conflict,omitempty"`
	PublishError    string `json:"publish_error,omitempty"`
	// Publishing is the commit ohd is about to write to the host's branch,
	// recorded before the ref moves: after a crash between the move and
	// recording Published, a host branch equal to it is ohd's own, not a
	// move by someone else.
	Publishing string `json:"publishing,omitempty"`

	ContainerID   string `json:"container_id,omitempty"`
	ContainerName string `json:"container_name,omitempty"`
	Image         string `json:"image,omitempty"`
	ImageID       string `json:"image_id,omitempty"`
	HostPort      int    `json:"host_port,omitempty"`

	UID int `json:"uid"`
	GID int `json:"gid"`
	// AgentUID and AgentGID are the user the conversation's container runs
	// as, a uid of its own (ohd serve --agent-uid), so that the user's git
	// refuses every git directory the agent makes (package gitboundary).
	// 0 in records made before, whose containers ran as UID:GID, until
	// their container is next created.
	AgentUID int `json:"agent_uid,omitempty"`
	AgentGID int `json:"agent_gid,omitempty"`

	Grants      Grants `json:"grants"`
	BrokerEpoch uint64 `json:"broker_epoch"`
	BrokerDir   string `json:"broker_dir,omitempty"`

	// Request is the conversation-API create body as forwarded to the
	// inner server (secret-free), kept so a restarted container can be
	// given its conversation again.
	Request json.RawMessage `json:"request,omitempty"`
	// LaunchedAgentProfile is the agent server's launched_agent_profile
	// ({"agent_profile_id","revision"}) of a conversation launched from
	// an agent profile, which ohd resolves itself, so the inner server
	// never records it; the conversation API adds it to its answers.
	LaunchedAgentProfile json.RawMessage `json:"launched_agent_profile,omitempty"`

	Notes      []string `json:"notes,omitempty"`
	Error      string   `json:"error,omitempty"`
	FailedStep string   `json:"failed_step,omitempty"`
	// UndoPending says the undo of this failed create did not finish: the
	// record still owns what was left, and ohd retries the undo (at
	// start-up and periodically) until it is done.
	UndoPending bool     `json:"undo_pending,omitempty"`
	Removal     *Removal `json:"removal,omitempty"`
	// RemovalFailed says why the last removal of this live conversation
	// could not save its work (so it removed nothing) and how to get the
	// work out: "removal failed: <why>; ...". A later removal clears it.
	RemovalFailed string `json:"removal_failed,omitempty"`
	// EngineStalls are the engine calls on this conversation's container
	// that ohd gave up on ("engine call exec start on container ... timed
	// out at ..."), as the control API's show fills them in from the
	// runtime (runtime.StallReporter); the store does not keep them (it
	// clears the field on every write).
	EngineStalls []string `json:"engine_stalls,omitempty"`

	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	LastActiveAt time.Time `json:"last_active_at"`
}

// Egress modes (Conversation.Egress).
const (
	EgressBroker = "broker"
	EgressOpen   = "open"
)

// EgressMode is how c's container reaches the network: c.Egress, or
// EgressOpen for a container conversation recorded before ohd recorded
// the mode (its container was made on the engine's network, and keeps
// it: upgraded reports whether that is why). "" for the local runtime.
func (c Conversation) EgressMode() (mode string, upgraded bool) {
	if c.Egress != "" || c.Runtime != "docker" {
		return c.Egress, false
	}
	return EgressOpen, true
}

// UpgradedEgressNote says what an upgraded conversation's open egress
// means and what to do (EgressMode).
const UpgradedEgressNote = "made by an earlier ohd, its container keeps the engine's open network (no broker egress); remove it and create it anew for the broker's egress"

// Git layouts (Conversation.GitLayout).
const (
	GitLayoutView   = "view"
	GitLayoutShared = "shared"
)

// Clone returns a deep copy of c.
func (c *Conversation) Clone() Conversation {
	out := *c
	out.Grants = c.Grants.clone()
	out.Notes = slices.Clone(c.Notes)
	out.Request = slices.Clone(c.Request)
	if c.Removal != nil {
		r := *c.Removal
		r.Kept = slices.Clone(c.Removal.Kept)
		out.Removal = &r
	}
	return out
}

// NewID returns a random (version 4) UUID in canonical form.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("store: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ValidID reports whether s is a UUID in canonical lower-case form
// (8-4-4-4-12 hex digits). Conversation ids become path elements, branch
// names and labels, so nothing else is accepted.
func ValidID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("store: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// CreateConversation writes a new record; ErrExists if the id is taken.
func (s *Store) CreateConversation(c Conversation) error {
	return s.CreateConversationWithKey(c, nil)
}

// CreateConversationWithKey writes a new record and, when innerKey is not
// nil, its sealed inner key, in one transaction (one disk sync).
func (s *Store) CreateConversationWithKey(c Conversation, innerKey []byte) error {
	if !ValidID(c.ID) {
		return fmt.Errorf("create conversation %q: id is not a UUID", c.ID)
	}
	now := time.Now().UTC()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.UpdatedAt = now
	if c.LastActiveAt.IsZero() {
		c.LastActiveAt = now
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketConversations)
		if b.Get([]byte(c.ID)) != nil {
			return fmt.Errorf("create conversation %s: %w", c.ID, ErrExists)
		}
		if innerKey != nil {
			if err := tx.Bucket(bucketConvKeys).Put([]byte(c.ID), s.key.Seal("conversation_keys|"+c.ID, innerKey)); err != nil {
				return err
			}
		}
		return putJSON(b, c.ID, &c)
	})
	if err != nil {
		return err
	}
	s.setCached(c.ID, &c)
	if innerKey != nil {
		s.mu.Lock()
		s.innerKeys[c.ID] = slices.Clone(innerKey)
		s.mu.Unlock()
	}
	return nil
}

// UpdateConversation applies fn to the record of id and writes it back in
// one transaction. fn's error aborts the update and is returned as is.
func (s *Store) UpdateConversation(id string, fn func(*Conversation) error) (Conversation, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c, err := s.Conversation(id)
	if err != nil {
		return Conversation{}, err
	}
	if err := fn(&c); err != nil {
		return Conversation{}, err
	}
	c.ID = id
	c.UpdatedAt = time.Now().UTC()
	c.EngineStalls = nil // shown, never kept
	err = s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketConversations), id, &c)
	})
	if err != nil {
		return Conversation{}, fmt.Errorf("update conversation %s: %w", id, err)
	}
	s.setCached(id, &c)
	return c, nil
}

// errFresh aborts a Touch whose record another one has just written.
var errFresh = errors.New("touched meanwhile")

// Touch records activity on a conversation without a disk write more than
// once per interval, so hot paths can call it on every request.
func (s *Store) Touch(id string, interval time.Duration) {
	s.mu.RLock()
	c, ok := s.convs[id]
	stale := ok && time.Since(c.LastActiveAt) >= interval
	s.mu.RUnlock()
	if !stale {
		return
	}
	// Concurrent requests of one conversation all find it stale: one
	// writes (a commit with an fsync), the others need not wait for it.
	if _, busy := s.touching.LoadOrStore(id, struct{}{}); busy {
		return
	}
	defer s.touching.Delete(id)
	_, _ = s.UpdateConversation(id, func(c *Conversation) error {
		if time.Since(c.LastActiveAt) < interval {
			return errFresh // another Touch wrote it meanwhile
		}
		c.LastActiveAt = time.Now().UTC()
		return nil
	})
}

// Peek calls fn with the record of id under the store's read lock and
// reports whether id exists: for a hot path that needs a few fields
// without copying the whole record. fn must not change or keep c, nor call
// the store.
func (s *Store) Peek(id string, fn func(c *Conversation)) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.convs[id]
	if ok {
		fn(c)
	}
	return ok
}

// Conversation returns the record of id, or ErrNotFound.
func (s *Store) Conversation(id string) (Conversation, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.convs[id]
	if !ok {
		return Conversation{}, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	return c.Clone(), nil
}

// Conversations returns every record, oldest first.
func (s *Store) Conversations() []Conversation {
	s.mu.RLock()
	out := make([]Conversation, 0, len(s.convs))
	for _, c := range s.convs {
		out = append(out, c.Clone())
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// DeleteConversation removes the record of id, its sealed keys and the
// records of the git branches it created.
func (s *Store) DeleteConversation(id string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.Conversation(id); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketConversations).Delete([]byte(id)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketSecretKeys).Delete([]byte(id)); err != nil {
			return err
		}
		if err := deleteGitBranches(tx, id); err != nil {
			return err
		}
		return tx.Bucket(bucketConvKeys).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete conversation %s: %w", id, err)
	}
	s.setCached(id, nil)
	return nil
}

// setCached replaces the in-memory copy of id (nil deletes it). Callers
// hold wmu, so the cache changes in commit order.
func (s *Store) setCached(id string, c *Conversation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == nil {
		delete(s.convs, id)
		delete(s.innerKeys, id)
		return
	}
	cc := c.Clone()
	s.convs[id] = &cc
}

// SetInnerKey stores the conversation's inner session key, sealed.
func (s *Store) SetInnerKey(id string, key []byte) error {
	sealed := s.key.Seal("conversation_keys|"+id, key)
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketConvKeys).Put([]byte(id), sealed)
	})
	if err == nil {
		s.mu.Lock()
		s.innerKeys[id] = slices.Clone(key)
		s.mu.Unlock()
	}
	return err
}

// InnerKey returns the conversation's inner session key. The proxy asks
// for it on every forwarded request, so an opened key is kept in memory
// (the daemon holds it anyway, and is not dumpable).
func (s *Store) InnerKey(id string) ([]byte, error) {
	s.mu.RLock()
	k, ok := s.innerKeys[id]
	s.mu.RUnlock()
	if ok {
		return slices.Clone(k), nil
	}
	var sealed []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketConvKeys).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("inner key of %s: %w", id, ErrNotFound)
		}
		sealed = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	k, err = s.key.Open("conversation_keys|"+id, sealed)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.innerKeys[id] = k
	s.mu.Unlock()
	return slices.Clone(k), nil
}

// InnerSecretKey returns the conversation's inner secret key (the inner
// server's cipher key, OH_SECRET_KEY), creating it with newKey on first
// use. Unlike the inner session key it never changes: the inner server's
// persisted secrets are encrypted with it.
func (s *Store) InnerSecretKey(id string, newKey func() []byte) ([]byte, error) {
	ad := "conversation_secret_keys|" + id
	var key []byte
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSecretKeys)
		if v := b.Get([]byte(id)); v != nil {
			k, err := s.key.Open(ad, v)
			key = k
			return err
		}
		key = newKey()
		return b.Put([]byte(id), s.key.Seal(ad, key))
	})
	if err != nil {
		return nil, fmt.Errorf("inner secret key of %s: %w", id, err)
	}
	return key, nil
}
