package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	bolt "go.etcd.io/bbolt"

	"github.com/ohd-dev/ohd/pkg/masterkey"
)

func newKey(t *testing.T, b byte) *masterkey.Key {
	t.Helper()
	k, err := masterkey.New(bytes.Repeat([]byte{b}, masterkey.Size))
	if err != nil {
		t.Fatal(err)
	}
	k.Source = "test-key"
	return k
}

func openStore(t *testing.T, path string, key *masterkey.Key) *Store {
	t.Helper()
	s, err := Open(path, key, Options{})
	if err != nil {
		t.Fatalf("Open(%q) = %v", path, err)
	}
	return s
}

func TestReopenKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	key := newKey(t, 1)
	s := openStore(t, path, key)
	id := NewID()
	conv := Conversation{
		ID: id, State: StateRunning, Runtime: "local", Workspace: "/w", WorkingDir: "/w",
		Grants: Grants{Secrets: []string{"a"}, Git: []string{"github.com/org"}}, BrokerEpoch: 3,
	}
	if err := s.CreateConversation(conv); err != nil {
		t.Fatal(err)
	}
	if err := s.SetInnerKey(id, []byte("inner-key-value")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSecret("api", []byte("s3cret")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLLMProfile(LLMProfile{Name: "default", Model: "m", BaseURL: "http://x", KeySecret: "api"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutOAuthServer(OAuthServer{Name: "gh", TokenURL: "http://t", ClientID: "c"}, []byte("refresh-tok")); err != nil {
		t.Fatal(err)
	}
	s.AuditAsync(AuditRecord{Time: time.Now(), Source: "broker", Conversation: id, Route: "GET /v1/whoami", Allowed: true})
	serverID := s.ServerID()
	before, err := s.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, path, key)
	defer s.Close()
	if s.ServerID() != serverID {
		t.Errorf("ServerID after reopen = %q, want %q", s.ServerID(), serverID)
	}
	after, err := s.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("store changed across reopen (-before +after):\n%s", diff)
	}
	got, err := s.Conversation(id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(conv, got, cmpopts.IgnoreFields(Conversation{}, "CreatedAt", "UpdatedAt", "LastActiveAt")); diff != "" {
		t.Errorf("Conversation(%q) (-want +got):\n%s", id, diff)
	}
	if v, err := s.InnerKey(id); err != nil || string(v) != "inner-key-value" {
		t.Errorf("InnerKey = %q, %v", v, err)
	}
	if v, err := s.Secret("api"); err != nil || string(v) != "s3cret" {
		t.Errorf("Secret(api) = %q, %v", v, err)
	}
	o, err := s.OAuthServer("gh")
	if err != nil {
		t.Fatal(err)
	}
	if _, refresh, err := s.OAuthTokens(o); err != nil || string(refresh) != "refresh-tok" {
		t.Errorf("OAuthTokens refresh = %q, %v", refresh, err)
	}
	recs, err := s.Audit(AuditFilter{Conversation: id})
	if err != nil || len(recs) != 1 || recs[0].Route != "GET /v1/whoami" {
		t.Errorf("Audit = %+v, %v; want the one record", recs, err)
	}
}

func TestWrongKeyRefusedAndNothingWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := openStore(t, path, newKey(t, 1))
	if err := s.SetSecret("x", []byte("value")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, newKey(t, 2), Options{})
	if !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key = %v, want ErrWrongKey", err)
	}
	for _, want := range []string{path, "test-key", "restore the original key"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(orig, now) {
		t.Error("the store file changed after a refused open")
	}
	// The right key still works.
	s = openStore(t, path, newKey(t, 1))
	defer s.Close()
	if v, err := s.Secret("x"); err != nil || string(v) != "value" {
		t.Errorf("Secret(x) = %q, %v", v, err)
	}
}

func TestSecretsNeverInClear(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := openStore(t, path, newKey(t, 7))
	values := map[string]string{
		"secret": "PLAINTEXT-SECRET-0123456789",
		"inner":  "PLAINTEXT-INNER-KEY-98765",
		"oauth":  "PLAINTEXT-REFRESH-TOKEN-555",
		"access": "PLAINTEXT-ACCESS-TOKEN-777",
	}
	id := NewID()
	if err := s.CreateConversation(Conversation{ID: id, State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	must(t, s.SetSecret("one", []byte(values["secret"])))
	must(t, s.SetInnerKey(id, []byte(values["inner"])))
	must(t, s.PutOAuthServer(OAuthServer{Name: "o", TokenURL: "http://t"}, []byte(values["oauth"])))
	must(t, s.SetOAuthTokens("o", []byte(values["access"]), nil, time.Now()))
	must(t, s.Close())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range values {
		if bytes.Contains(data, []byte(v)) {
			t.Errorf("the %s value appears in clear in %s", what, path)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSealedValueBoundToItsName(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := openStore(t, path, newKey(t, 1))
	defer s.Close()
	must(t, s.SetSecret("a", []byte("va")))
	must(t, s.SetSecret("b", []byte("vb")))
	// Copy a's sealed record over b's: it must not open as b.
	dump, err := s.Dump()
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSecrets).Put([]byte("b"), []byte(dump["secrets/a"]))
	})
	must(t, err)
	if v, err := s.Secret("b"); !errors.Is(err, masterkey.ErrDecrypt) {
		t.Errorf("Secret(b) after swapping in a's value = %q, %v; want ErrDecrypt", v, err)
	}
}

func TestOpenLockedByAnotherProcess(t *testing.T) {
	// bbolt's flock is per open file description, so a second Open in the
	// same process conflicts exactly like another process would.
	path := filepath.Join(t.TempDir(), FileName)
	s := openStore(t, path, newKey(t, 1))
	defer s.Close()
	_, err := Open(path, newKey(t, 1), Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

func TestConversationUpdateAndCache(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), FileName), newKey(t, 1))
	defer s.Close()
	id := NewID()
	must(t, s.CreateConversation(Conversation{ID: id, State: StateProvisioning}))
	if err := s.CreateConversation(Conversation{ID: id}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateConversation twice = %v, want ErrExists", err)
	}
	c, err := s.UpdateConversation(id, func(c *Conversation) error {
		c.State = StateRunning
		c.Grants.Add(KindSecret, "x")
		return nil
	})
	must(t, err)
	if c.State != StateRunning {
		t.Errorf("state = %q", c.State)
	}
	// Mutating a returned copy must not change the store.
	c.Grants.Secrets[0] = "mutated"
	got, _ := s.Conversation(id)
	if got.Grants.Secrets[0] != "x" {
		t.Errorf("store cache aliased a returned slice: %v", got.Grants.Secrets)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateConversation(id, func(c *Conversation) error { c.State = StateFailed; return boom }); !errors.Is(err, boom) {
		t.Errorf("UpdateConversation error = %v, want boom", err)
	}
	if got, _ := s.Conversation(id); got.State != StateRunning {
		t.Errorf("aborted update changed state to %q", got.State)
	}
	if _, err := s.Conversation(NewID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Conversation(unknown) = %v, want ErrNotFound", err)
	}
	// Peek sees the committed record (not the aborted update) and says
	// whether it exists.
	var peeked State
	if !s.Peek(id, func(c *Conversation) { peeked = c.State }) || peeked != StateRunning {
		t.Errorf("Peek = %q, want %q", peeked, StateRunning)
	}
	if s.Peek(NewID(), func(*Conversation) { t.Error("Peek called fn for an unknown id") }) {
		t.Error("Peek(unknown) = true")
	}
	must(t, s.DeleteConversation(id))
	if _, err := s.Conversation(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

func TestConcurrentUpdates(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), FileName), newKey(t, 1))
	defer s.Close()
	id := NewID()
	must(t, s.CreateConversation(Conversation{ID: id}))
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.UpdateConversation(id, func(c *Conversation) error { c.BrokerEpoch++; return nil })
			if err != nil {
				t.Error(err)
			}
			_, _ = s.Conversation(id)
		}()
	}
	wg.Wait()
	if c, _ := s.Conversation(id); c.BrokerEpoch != 20 {
		t.Errorf("epoch after 20 increments = %d", c.BrokerEpoch)
	}
}

func TestAuditTrimAndFilter(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), FileName), newKey(t, 1), Options{AuditMax: 10})
	must(t, err)
	defer s.Close()
	a, b := NewID(), NewID()
	for i := 0; i < 25; i++ {
		id := a
		if i%2 == 1 {
			id = b
		}
		s.AuditAsync(AuditRecord{Time: time.Now(), Conversation: id, Route: "r", Allowed: true})
	}
	all, err := s.Audit(AuditFilter{})
	must(t, err)
	if len(all) != 10 {
		t.Fatalf("kept %d records, want 10", len(all))
	}
	if all[0].Seq != 16 || all[9].Seq != 25 {
		t.Errorf("kept seqs %d..%d, want the newest 16..25", all[0].Seq, all[9].Seq)
	}
	onlyB, err := s.Audit(AuditFilter{Conversation: b, Limit: 2})
	must(t, err)
	if len(onlyB) != 2 || onlyB[0].Conversation != b || onlyB[1].Seq != 24 {
		t.Errorf("filtered = %+v", onlyB)
	}
}

func TestValidIDAndName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{NewID(), true},
		{"0b5e4c1a-1d2e-4f00-8a9b-0123456789ab", true},
		{"0B5E4C1A-1D2E-4F00-8A9B-0123456789AB", false},
		{"0b5e4c1a1d2e4f008a9b0123456789ab", false},
		{"../../../../etc/passwd-aaaaaaaaaaaaaa", false},
		{"", false},
		{"0b5e4c1a-1d2e-4f00-8a9b-0123456789a\x00", false},
	} {
		if got := ValidID(tc.in); got != tc.want {
			t.Errorf("ValidID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"openai-key", true}, {"a.b_c-D9", true}, {"", false}, {"-x", false}, {".x", false},
		{"a/b", false}, {"a b", false}, {string(bytes.Repeat([]byte("a"), 129)), false}, {"é", false},
	} {
		if got := ValidName(tc.in); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzValidID(f *testing.F) {
	f.Add(NewID())
	f.Add("../x")
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidID(s) {
			return
		}
		if filepath.Base(s) != s || filepath.Clean(s) != s || len(s) != 36 {
			t.Fatalf("ValidID accepted %q, which is not a plain path element", s)
		}
	})
}

func TestInnerKeyCacheFollowsWrites(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), FileName), newKey(t, 1))
	defer s.Close()
	id := NewID()
	must(t, s.CreateConversation(Conversation{ID: id}))
	must(t, s.SetInnerKey(id, []byte("one")))
	k, err := s.InnerKey(id)
	must(t, err)
	k[0] = 'X' // a caller's copy must not reach the cache
	must(t, s.SetInnerKey(id, []byte("two")))
	if k, _ := s.InnerKey(id); string(k) != "two" {
		t.Errorf("InnerKey after a new key = %q, want two", k)
	}
	must(t, s.DeleteConversation(id))
	if _, err := s.InnerKey(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("InnerKey after delete = %v, want ErrNotFound", err)
	}
}

// TestTouch checks Touch writes at most once per interval, and not while
// another Touch of the same conversation is writing.
func TestTouch(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), FileName), newKey(t, 1))
	defer s.Close()
	id := NewID()
	old := time.Now().Add(-time.Hour).UTC()
	must(t, s.CreateConversation(Conversation{ID: id, State: StateRunning, LastActiveAt: old}))
	last := func() time.Time {
		c, err := s.Conversation(id)
		must(t, err)
		return c.LastActiveAt
	}
	s.touching.Store(id, struct{}{}) // as if another request were writing
	s.Touch(id, time.Second)
	if !last().Equal(old) {
		t.Errorf("Touch wrote while another Touch of %s was writing", id)
	}
	s.touching.Delete(id)
	s.Touch(id, time.Second)
	first := last()
	if !first.After(old) {
		t.Fatalf("Touch of a stale conversation left LastActiveAt at %v", first)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { s.Touch(id, time.Hour) })
	}
	wg.Wait()
	if !last().Equal(first) {
		t.Errorf("Touch within the interval wrote: %v, want %v", last(), first)
	}
}

// TestAuditAsync checks the queue: concurrent records all land, in one
// piece each, and a full queue makes AuditAsync write by itself instead of
// dropping the record.
func TestAuditAsync(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), FileName), newKey(t, 1))
	defer s.Close()
	id := NewID()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				s.AuditAsync(AuditRecord{Time: time.Now(), Source: "broker", Conversation: id, Route: "/v1/whoami", Status: 200 + g, Code: fmt.Sprint(i)})
			}
		})
	}
	wg.Wait()
	recs, err := s.Audit(AuditFilter{Conversation: id})
	must(t, err)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[fmt.Sprint(r.Status, "/", r.Code)] = true
	}
	if len(recs) != 8000 || len(seen) != 8000 {
		t.Errorf("%d records (%d distinct) after 8000 AuditAsync, want 8000", len(recs), len(seen))
	}

	// A full queue: the record is written at once. In a store of its own
	// whose writer never ticks, because the writer of s could take the
	// filled queue as a batch between the fill and AuditAsync, and the
	// record then waited in an empty queue (seen under load: 0 times).
	s2, err := Open(filepath.Join(t.TempDir(), FileName), newKey(t, 2), Options{AuditFlush: time.Hour})
	must(t, err)
	defer s2.Close()
	s = s2
	w := s.audit
	w.mu.Lock()
	saved := w.queue
	w.queue = make([]AuditRecord, auditQueueMax)
	w.mu.Unlock()
	other := NewID()
	s.AuditAsync(AuditRecord{Time: time.Now(), Source: "broker", Conversation: other, Route: "/v1/whoami", Status: 200})
	n := 0
	must(t, s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAudit).ForEach(func(_, v []byte) error {
			if bytes.Contains(v, []byte(other)) {
				n++
			}
			return nil
		})
	}))
	w.mu.Lock()
	w.queue = saved
	w.mu.Unlock()
	if n != 1 {
		t.Errorf("with a full queue, the record is in the store %d times before any flush, want 1", n)
	}
}

// TestInnerSecretKeyStable checks the inner secret key is made once, kept
// across a reopen, sealed in the file, and deleted with the record.
func TestInnerSecretKeyStable(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	key := newKey(t, 1)
	s := openStore(t, path, key)
	id := NewID()
	must(t, s.CreateConversation(Conversation{ID: id}))
	made := 0
	gen := func() []byte { made++; return []byte("inner-secret-key-value-" + strconv.Itoa(made)) }
	k1, err := s.InnerSecretKey(id, gen)
	must(t, err)
	must(t, s.Close())
	raw, err := os.ReadFile(path)
	must(t, err)
	if bytes.Contains(raw, k1) {
		t.Fatalf("the inner secret key is in %s in clear", path)
	}
	s = openStore(t, path, key)
	defer s.Close()
	k2, err := s.InnerSecretKey(id, gen)
	must(t, err)
	if string(k2) != string(k1) || made != 1 {
		t.Errorf("InnerSecretKey after reopen = %q (made %d), want %q made once", k2, made, k1)
	}
	must(t, s.DeleteConversation(id))
	k3, err := s.InnerSecretKey(id, gen)
	must(t, err)
	if string(k3) == string(k1) {
		t.Errorf("InnerSecretKey after delete = the old key, want a new one")
	}
}

func TestDeleteScoped(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), FileName), newKey(t, 1))
	t.Cleanup(func() { s.Close() })
	id, other := NewID(), NewID()
	for _, n := range []string{id + ".llm", id + ".GITHUB_TOKEN", other + ".llm", "shared"} {
		if err := s.SetSecret(n, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutLLMProfile(LLMProfile{Name: id + ".llm", KeySecret: id + ".llm"}); err != nil {
		t.Fatal(err)
	}
	mcp := MCPServer{Name: id + ".mcp-linear", URL: "https://mcp.example/mcp", Headers: []MCPHeader{{Name: "Authorization", Secret: id + ".mcp-linear.1"}}}
	if err := s.PutMCPServer(mcp); err != nil {
		t.Fatal(err)
	}
	if got, err := s.MCPServer(mcp.Name); err != nil || !cmp.Equal(got, mcp) {
		t.Fatalf("MCPServer = %+v, %v; want %+v", got, err, mcp)
	}
	if err := s.PutMCPServer(MCPServer{Name: "../x"}); err == nil {
		t.Error("PutMCPServer with a bad name succeeded")
	}
	n, err := s.DeleteScoped(id)
	if err != nil || n != 4 {
		t.Fatalf("DeleteScoped = %d, %v; want 4, nil", n, err)
	}
	if _, err := s.MCPServer(mcp.Name); !errors.Is(err, ErrNotFound) {
		t.Errorf("MCP server after DeleteScoped: %v, want ErrNotFound", err)
	}
	infos, _ := s.Secrets()
	var left []string
	for _, i := range infos {
		left = append(left, i.Name)
	}
	if d := cmp.Diff([]string{other + ".llm", "shared"}, left); d != "" {
		t.Errorf("secrets left (-want +got):\n%s", d)
	}
	if _, err := s.LLMProfile(id + ".llm"); !errors.Is(err, ErrNotFound) {
		t.Errorf("profile after DeleteScoped: %v, want ErrNotFound", err)
	}
	if _, err := s.DeleteScoped("../x"); err == nil {
		t.Error("DeleteScoped of a non-id succeeded")
	}
}

// TestMigrateSharedLayout: a schema 1 file's conversations with a
// worktree come out as GitLayoutShared (they were made before git views),
// those without one untouched, and the file is at SchemaVersion.
func TestMigrateSharedLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ohd.db")
	key := newKey(t, 1)
	s := openStore(t, path, key)
	withWT := Conversation{ID: NewID(), State: StateRunning, Workspace: "/w", Worktree: "/r/x/w", CommonDir: "/w/.git"}
	plain := Conversation{ID: NewID(), State: StateRunning, Workspace: "/p"}
	for _, c := range []Conversation{withWT, plain} {
		if err := s.CreateConversation(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Make it a schema 1 file, as ohd before git views wrote it.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put(keySchema, []byte("1")); err != nil {
			return err
		}
		b := tx.Bucket(bucketConversations)
		return b.ForEach(func(k, v []byte) error {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(v, &m); err != nil {
				return err
			}
			if _, ok := m["git_layout"]; ok {
				return fmt.Errorf("a fresh record has git_layout already: %s", v)
			}
			return nil
		})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path, key)
	defer s.Close()
	if c, _ := s.Conversation(withWT.ID); c.GitLayout != GitLayoutShared {
		t.Errorf("migrated worktree record: GitLayout = %q, want %q", c.GitLayout, GitLayoutShared)
	}
	if c, _ := s.Conversation(plain.ID); c.GitLayout != "" {
		t.Errorf("migrated record without worktree: GitLayout = %q, want none", c.GitLayout)
	}
	var v string
	_ = s.db.View(func(tx *bolt.Tx) error { v = string(tx.Bucket(bucketMeta).Get(keySchema)); return nil })
	if v != strconv.Itoa(SchemaVersion) {
		t.Errorf("schema after migration = %s, want %d", v, SchemaVersion)
	}
}

// TestMigrateInnerInContainer: a schema 2 file's live conversations with
// a container come out as InnerInContainer (their inner state is in that
// container's writable layer); those without a container, and those
// over, do not.
func TestMigrateInnerInContainer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ohd.db")
	key := newKey(t, 1)
	s := openStore(t, path, key)
	running := Conversation{ID: NewID(), State: StateRunning, Workspace: "/w", ContainerID: "c1"}
	stopped := Conversation{ID: NewID(), State: StateStopped, Workspace: "/w", ContainerID: "c2"}
	noContainer := Conversation{ID: NewID(), State: StateStopped, Workspace: "/w"}
	deleted := Conversation{ID: NewID(), State: StateDeleted, Workspace: "/w", ContainerID: "c3"}
	for _, c := range []Conversation{running, stopped, noContainer, deleted} {
		if err := s.CreateConversation(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("2")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path, key)
	defer s.Close()
	for _, tc := range []struct {
		c    Conversation
		want bool
	}{{running, true}, {stopped, true}, {noContainer, false}, {deleted, false}} {
		if c, _ := s.Conversation(tc.c.ID); c.InnerInContainer != tc.want {
			t.Errorf("%s record with container %q: InnerInContainer = %v, want %v", tc.c.State, tc.c.ContainerID, c.InnerInContainer, tc.want)
		}
	}
}
