package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ohd-dev/ohd/pkg/masterkey"
)

// SchemaVersion is the version of the bucket layout this code writes.
const SchemaVersion = 3

// FileName is the database's name inside the state directory.
const FileName = "ohd.db"

// Sentinel errors; test for them with errors.Is.
var (
	// ErrNotFound is returned when a conversation, secret or other named
	// item does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists is returned when creating an item whose key is taken.
	ErrExists = errors.New("already exists")
	// ErrWrongKey is returned by Open when the master key is not the one
	// the file was created with. Nothing is written in that case.
	ErrWrongKey = errors.New("master key does not match the store")
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("store is in use by another process")
	// ErrNewerSchema is returned by Open for a file of a newer ohd.
	ErrNewerSchema = errors.New("store was written by a newer ohd")
)

var (
	bucketMeta          = []byte("meta")
	bucketConversations = []byte("conversations")
	bucketConvKeys      = []byte("conversation_keys")
	bucketSecretKeys    = []byte("conversation_secret_keys")
	bucketSecrets       = []byte("secrets")
	bucketGitCreds      = []byte("git_credentials")
	bucketLLM           = []byte("llm_profiles")
	bucketOAuth         = []byte("oauth_servers")
	bucketMCP           = []byte("mcp_servers")
	bucketAudit         = []byte("audit")
	bucketGitBranches   = []byte("git_branches")

	keySchema   = []byte("schema_version")
	keyServerID = []byte("server_id")
	keyCheck    = []byte("key_check")
)

const keyCheckPlain = "ohd-master-key-check-v1"

// Options configures Open. The zero value is usable.
type Options struct {
	// Logger receives store warnings; nil discards them.
	Logger *slog.Logger
	// LockTimeout bounds the wait for bbolt's file lock; 0 means 1s.
	LockTimeout time.Duration
	// AuditFlush is the audit writer's batching interval; 0 means 100ms.
	AuditFlush time.Duration
	// AuditMax caps the number of audit records kept; the oldest are
	// dropped past it. 0 means 200000.
	AuditMax int
}

// Store is ohd's bbolt-backed state. It is safe for concurrent use.
type Store struct {
	db       *bolt.DB
	key      *masterkey.Key
	log      *slog.Logger
	serverID string

	// wmu serializes writers of conversations, so the cache below
	// changes in commit order; mu guards the cache alone, so readers never
	// wait for a disk write.
	wmu   sync.Mutex
	mu    sync.RWMutex
	convs map[string]*Conversation // committed copy of bucket conversations
	// innerKeys caches opened inner session keys (mu guards it too).
	innerKeys map[string][]byte

	audit *auditWriter
	// touching holds the ids whose LastActiveAt a Touch is writing.
	touching sync.Map
}

// Open opens (creating if needed) the store at path with the master key.
// A wrong key returns ErrWrongKey and leaves the file untouched.
func Open(path string, key *masterkey.Key, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open store %s: %w: is another ohd running on this state directory?", path, ErrLocked)
		}
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{db: db, key: key, log: opts.Logger, convs: map[string]*Conversation{}, innerKeys: map[string][]byte{}}
	if err := s.init(path); err != nil {
		db.Close()
		return nil, err
	}
	s.audit = newAuditWriter(s, opts.AuditFlush, opts.AuditMax)
	return s, nil
}

// init checks the key and schema and creates the buckets, in that order,
// so a wrong key or newer schema writes nothing.
func (s *Store) init(path string) error {
	var fresh bool
	err := s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			fresh = true
			return nil
		}
		if sealed := meta.Get(keyCheck); sealed != nil {
			pt, err := s.key.Open("meta|key_check", sealed)
			if err != nil || string(pt) != keyCheckPlain {
				return fmt.Errorf("open store %s: %w: the key at %s is not the one this state was created with; restore the original key (nothing was changed)", path, ErrWrongKey, s.key.Source)
			}
		}
		if v := meta.Get(keySchema); v != nil {
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return fmt.Errorf("open store %s: bad schema version %q", path, v)
			}
			if n > SchemaVersion {
				return fmt.Errorf("open store %s: %w (schema %d, this ohd knows %d): upgrade ohd", path, ErrNewerSchema, n, SchemaVersion)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketConversations, bucketConvKeys, bucketSecretKeys, bucketSecrets, bucketGitCreds, bucketLLM, bucketOAuth, bucketMCP, bucketAudit, bucketGitBranches} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if meta.Get(keyCheck) == nil {
			if err := meta.Put(keyCheck, s.key.Seal("meta|key_check", []byte(keyCheckPlain))); err != nil {
				return err
			}
		}
		if err := migrate(tx, fresh); err != nil {
			return err
		}
		id := meta.Get(keyServerID)
		if id == nil {
			id = []byte(randomHex(8))
			if err := meta.Put(keyServerID, id); err != nil {
				return err
			}
		}
		s.serverID = string(id)
		return tx.Bucket(bucketConversations).ForEach(func(k, v []byte) error {
			var c Conversation
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("conversation %s: %w", k, err)
			}
			s.convs[c.ID] = &c
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("open store %s: %w", path, err)
	}
	return nil
}

// migrations[i] upgrades a file from schema i+1 to i+2.
var migrations = []func(tx *bolt.Tx) error{
	migrateSharedLayout,
	migrateInnerInContainer,
}

// migrateSharedLayout (1 -> 2): conversations with a worktree were made
// before git views: their containers mount the repository's git dir. They
// say so (GitLayoutShared), and the orchestrator gives each its own view
// when its container is next started.
func migrateSharedLayout(tx *bolt.Tx) error {
	return rewriteConversations(tx, func(c map[string]json.RawMessage) bool {
		if _, ok := c["worktree"]; !ok {
			return false
		}
		if _, ok := c["git_layout"]; ok {
			return false
		}
		c["git_layout"] = json.RawMessage(`"` + GitLayoutShared + `"`)
		return true
	})
}

// migrateInnerInContainer (2 -> 3): a live conversation with a container
// was made before the inner server's state had host directories: that
// state is in its container's writable layer (InnerInContainer) until
// the orchestrator copies it out.
func migrateInnerInContainer(tx *bolt.Tx) error {
	return rewriteConversations(tx, func(c map[string]json.RawMessage) bool {
		var id, state string
		_ = json.Unmarshal(c["container_id"], &id)
		_ = json.Unmarshal(c["state"], &state)
		if id == "" || state == string(StateDeleted) || state == string(StateFailed) {
			return false
		}
		c["inner_in_container"] = json.RawMessage("true")
		return true
	})
}

// rewriteConversations applies change to every conversation record and
// writes back those it reports changed.
func rewriteConversations(tx *bolt.Tx, change func(c map[string]json.RawMessage) bool) error {
	b := tx.Bucket(bucketConversations)
	type update struct{ k, v []byte }
	var updates []update
	err := b.ForEach(func(k, v []byte) error {
		var c map[string]json.RawMessage
		if err := json.Unmarshal(v, &c); err != nil {
			return fmt.Errorf("conversation %s: %w", k, err)
		}
		if !change(c) {
			return nil
		}
		nv, err := json.Marshal(c)
		if err != nil {
			return err
		}
		updates = append(updates, update{append([]byte{}, k...), nv})
		return nil
	})
	if err != nil {
		return err
	}
	for _, u := range updates {
		if err := b.Put(u.k, u.v); err != nil {
			return err
		}
	}
	return nil
}

func migrate(tx *bolt.Tx, fresh bool) error {
	meta := tx.Bucket(bucketMeta)
	from := SchemaVersion
	if v := meta.Get(keySchema); v != nil {
		from, _ = strconv.Atoi(string(v))
	} else if !fresh {
		from = 1
	}
	for v := from; v < SchemaVersion; v++ {
		if err := migrations[v-1](tx); err != nil {
			return fmt.Errorf("migrate schema %d to %d: %w", v, v+1, err)
		}
	}
	return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
}

// Close flushes pending audit records and closes the file.
func (s *Store) Close() error {
	s.audit.close()
	return s.db.Close()
}

// ServerID is this installation's random id (the containers' dev.ohd.server
// label), fixed when the store was created.
func (s *Store) ServerID() string { return s.serverID }

// Path is the database file's path.
func (s *Store) Path() string { return s.db.Path() }

func putJSON(b *bolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

func getJSON(b *bolt.Bucket, key string, v any) error {
	data := b.Get([]byte(key))
	if data == nil {
		return ErrNotFound
	}
	return json.Unmarshal(data, v)
}

// Dump returns every key of every bucket with its raw value, for tests that
// compare the state before and after an operation. Audit is left out: it
// grows by design.
func (s *Store) Dump() (map[string]string, error) {
	out := map[string]string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if bytes.Equal(name, bucketAudit) {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				out[string(name)+"/"+string(k)] = string(v)
				return nil
			})
		})
	})
	return out, err
}
