package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// The agent server keeps every conversation on disk under its
// conversations path (reference §5 "Metadata reads"):
//
//	<conversations_path>/<id.hex>/meta.json          StoredConversation
//	<conversations_path>/<id.hex>/base_state.json    ConversationState (execution_status, secret_registry)
//	<conversations_path>/<id.hex>/events/event-{idx:05d}-{event_id}.json
//
// and loads the catalog from the directories holding a meta.json at
// start-up (conversation_service.py L658-698). The standin does the same,
// so a conversation outlives its container exactly when ohd keeps that
// directory on the host.

// record is one conversation: what the API shows, plus its persisted
// secrets (Fernet tokens, or plaintext without a cipher) and events.
type record struct {
	info    ConversationInfo
	secrets map[string]json.RawMessage // persisted sources, secret fields sealed
	events  []json.RawMessage
	agent   json.RawMessage
}

// store holds the conversations, in creation order, written through to
// disk on every change.
type store struct {
	dir    string
	cipher *openhands.Fernet // nil: secrets persisted in plaintext (ref §1)

	mu    sync.Mutex
	byID  map[string]*record
	order []string
	subs  map[string]map[chan json.RawMessage]bool // live event subscribers
	// lease is the conversation lease (lease.go); nil when disabled.
	lease *leases
}

// served is the conversation id if this server may serve it: it exists
// and, with leasing on, this server holds or now takes its lease (a
// conversation whose lease another live owner holds is skipped, as the
// agent server skips it: 404, 4004). Callers hold mu.
func (st *store) served(id string) (*record, bool) {
	rec, ok := st.byID[id]
	if !ok {
		return nil, false
	}
	if st.lease != nil && !st.lease.claim(st.convDir(id)) {
		return nil, false
	}
	return rec, true
}

// releaseLeases releases every lease this server holds (a graceful
// shutdown closes every conversation).
func (st *store) releaseLeases() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lease != nil {
		st.lease.releaseAll()
	}
}

// metaFile is the standin's StoredConversation.
type metaFile struct {
	ID        string            `json:"id"`
	Title     *string           `json:"title"`
	Workspace Workspace         `json:"workspace"`
	Tags      map[string]string `json:"tags"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`

	ForkedFromConversationID *string `json:"forked_from_conversation_id"`
	ForkedFromEventID        *string `json:"forked_from_event_id"`
}

// baseState is the standin's ConversationState.
type baseState struct {
	ID              string          `json:"id"`
	Agent           json.RawMessage `json:"agent,omitempty"`
	Workspace       Workspace       `json:"workspace"`
	PersistenceDir  string          `json:"persistence_dir"`
	ExecutionStatus string          `json:"execution_status"`
	SecretRegistry  secretRegistry  `json:"secret_registry"`
}

type secretRegistry struct {
	SecretSources map[string]json.RawMessage `json:"secret_sources"`
}

// openStore creates dir (the server's lifespan does, and fails the start
// when it cannot: reference §6 "Startup sequence", conversation_service.py
// L1950-1951) and loads every conversation persisted there.
func openStore(dir string, cipher *openhands.Fernet) (*store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st := &store{dir: dir, cipher: cipher, byID: map[string]*record{}, subs: map[string]map[chan json.RawMessage]bool{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var loaded []*record
	for _, e := range entries {
		rec, err := st.load(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // only directories with a meta.json are conversations
		}
		if err != nil {
			return nil, err
		}
		loaded = append(loaded, rec)
	}
	slices.SortFunc(loaded, func(a, b *record) int { return a.info.CreatedAt.Compare(b.info.CreatedAt) })
	for _, rec := range loaded {
		st.byID[rec.info.ID] = rec
		st.order = append(st.order, rec.info.ID)
	}
	return st, nil
}

func (st *store) convDir(id string) string {
	return filepath.Join(st.dir, strings.ReplaceAll(id, "-", ""))
}

func (st *store) load(dir string) (*record, error) {
	var m metaFile
	if err := readJSON(filepath.Join(dir, "meta.json"), &m); err != nil {
		return nil, err
	}
	var b baseState
	if err := readJSON(filepath.Join(dir, "base_state.json"), &b); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if b.ExecutionStatus == "" {
		b.ExecutionStatus = statusIdle // state.py's default
	}
	rec := &record{
		info: ConversationInfo{ID: m.ID, Agent: publicAgent(b.Agent), Workspace: m.Workspace, ExecutionStatus: b.ExecutionStatus,
			Title: m.Title, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
			ForkedFromConversationID: m.ForkedFromConversationID, ForkedFromEventID: m.ForkedFromEventID},
		secrets: map[string]json.RawMessage{}, agent: b.Agent,
	}
	for name, src := range b.SecretRegistry.SecretSources {
		rec.secrets[name] = src
	}
	events, err := os.ReadDir(filepath.Join(dir, "events"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range events { // event-{idx:05d}-...: name order is index order
		raw, err := os.ReadFile(filepath.Join(dir, "events", e.Name()))
		if err != nil {
			return nil, err
		}
		rec.events = append(rec.events, json.RawMessage(raw))
	}
	return rec, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeFileJSON writes v to path atomically.
func writeFileJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// save writes rec's meta.json and base_state.json. Callers hold mu.
func (st *store) save(rec *record) error {
	dir := st.convDir(rec.info.ID)
	if err := os.MkdirAll(filepath.Join(dir, "events"), 0o700); err != nil {
		return err
	}
	m := metaFile{ID: rec.info.ID, Title: rec.info.Title, Workspace: rec.info.Workspace, Tags: map[string]string{},
		CreatedAt: rec.info.CreatedAt, UpdatedAt: rec.info.UpdatedAt,
		ForkedFromConversationID: rec.info.ForkedFromConversationID, ForkedFromEventID: rec.info.ForkedFromEventID}
	if err := writeFileJSON(filepath.Join(dir, "meta.json"), m); err != nil {
		return err
	}
	b := baseState{ID: rec.info.ID, Agent: rec.agent, Workspace: rec.info.Workspace, PersistenceDir: dir,
		ExecutionStatus: rec.info.ExecutionStatus, SecretRegistry: secretRegistry{SecretSources: rec.secrets}}
	return writeFileJSON(filepath.Join(dir, "base_state.json"), b)
}

// get returns a copy of the conversation id.
func (st *store) get(id string) (ConversationInfo, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c, ok := st.served(id)
	if !ok {
		return ConversationInfo{}, false
	}
	return c.info, true
}

// create adds c unless its id exists; it returns the stored conversation
// and whether it is new (reference §8: an existing id answers 200 with
// the existing conversation, the rest of the body ignored).
func (st *store) create(c ConversationInfo, agent json.RawMessage, secrets map[string]json.RawMessage) (ConversationInfo, bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.byID[c.ID]; ok {
		return old.info, false, nil
	}
	c.Agent = publicAgent(agent)
	rec := &record{info: c, agent: agent, secrets: map[string]json.RawMessage{}}
	for name, v := range secrets {
		sealed, err := st.seal(v)
		if err != nil {
			return c, false, err
		}
		rec.secrets[name] = sealed
	}
	if err := st.save(rec); err != nil {
		return c, false, err
	}
	if st.lease != nil {
		st.lease.claim(st.convDir(c.ID))
	}
	st.byID[c.ID] = rec
	st.order = append(st.order, c.ID)
	return c, true, nil
}

// seal returns a secret source as the server persists it (reference §1,
// conversation secrets): a plain string or {"value"} becomes a
// StaticSecret; a StaticSecret's value, and a LookupSecret's headers whose
// names is_secret_key accepts, become Fernet tokens under the server's
// cipher (plaintext without one, as the server does with a warning).
func (st *store) seal(raw json.RawMessage) (json.RawMessage, error) {
	var plain string
	if json.Unmarshal(raw, &plain) == nil {
		raw, _ = json.Marshal(map[string]string{"kind": "StaticSecret", "value": plain})
	}
	var src map[string]any
	if err := json.Unmarshal(raw, &src); err != nil || src == nil {
		return nil, fmt.Errorf("a secret source must be a string or an object")
	}
	if src["kind"] == nil {
		src["kind"] = "StaticSecret"
	}
	enc := func(v any) (any, error) {
		s, ok := v.(string)
		if !ok || st.cipher == nil || openhands.IsToken(s) {
			return v, nil
		}
		return st.cipher.Encrypt([]byte(s))
	}
	var err error
	switch src["kind"] {
	case "StaticSecret":
		src["value"], err = enc(src["value"])
	case "LookupSecret":
		if h, ok := src["headers"].(map[string]any); ok {
			for k, v := range h {
				if openhands.IsSecretKey(k) {
					if h[k], err = enc(v); err != nil {
						break
					}
				}
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(src)
}

// open returns the plaintext of a persisted source (what the server
// resolves it from): the StaticSecret's value, or the LookupSecret's url
// and headers; ok is false when a sealed field does not decrypt under the
// present cipher (the server drops such a value, reference §1).
func (st *store) open(raw json.RawMessage) (plain []byte, encrypted, ok bool) {
	var src map[string]any
	if json.Unmarshal(raw, &src) != nil {
		return nil, false, false
	}
	dec := func(v any) (any, bool) {
		s, isStr := v.(string)
		if !isStr || !openhands.IsToken(s) {
			return v, true
		}
		encrypted = true
		if st.cipher == nil {
			return nil, false
		}
		pt, err := st.cipher.Decrypt(s)
		return string(pt), err == nil
	}
	good := true
	switch src["kind"] {
	case "StaticSecret":
		v, okv := dec(src["value"])
		s, _ := v.(string)
		return []byte(s), encrypted, okv
	case "LookupSecret":
		if h, isMap := src["headers"].(map[string]any); isMap {
			for k, v := range h {
				var okv bool
				h[k], okv = dec(v)
				good = good && okv
			}
		}
	}
	b, _ := json.Marshal(src) // map keys sorted: stable
	return b, encrypted, good
}

// setSecrets adds secrets to conversation id (POST .../secrets).
func (st *store) setSecrets(id string, secrets map[string]json.RawMessage) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, ok := st.served(id)
	if !ok {
		return false, nil
	}
	for name, v := range secrets {
		sealed, err := st.seal(v)
		if err != nil {
			return true, err
		}
		rec.secrets[name] = sealed
	}
	rec.info.UpdatedAt = time.Now().UTC()
	return true, st.save(rec)
}

// secretReport says, per secret of conversation id, whether the server
// can still read it and the SHA-256 of what it reads: a token that no
// longer decrypts is dropped by the agent server (reference §1, failure
// behaviour), which is what a lost OH_SECRET_KEY does.
func (st *store) secretReport(id string) (map[string]secretStatus, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, ok := st.served(id)
	if !ok {
		return nil, false
	}
	out := map[string]secretStatus{}
	for name, raw := range rec.secrets {
		pt, enc, ok := st.open(raw)
		out[name] = secretStatus{Readable: ok, Encrypted: enc}
		if ok {
			out[name] = secretStatus{Readable: true, Encrypted: enc, SHA256: sha256Hex(pt)}
		}
	}
	return out, true
}

// secretStatus is one entry of the standin's secret report.
type secretStatus struct {
	Readable  bool   `json:"readable"`
	Encrypted bool   `json:"encrypted"`
	SHA256    string `json:"sha256,omitempty"`
}

// appendEvent persists ev (an Event JSON object with an "id") as the next
// event of conversation id and hands it to live subscribers; it returns
// the event's index (its seq).
func (st *store) appendEvent(id string, ev json.RawMessage, evID string) (int, bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, ok := st.served(id)
	if !ok {
		return 0, false, nil
	}
	idx := len(rec.events)
	name := fmt.Sprintf("event-%05d-%s.json", idx, evID) // persistence_const.py L4-10
	dir := filepath.Join(st.convDir(id), "events")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, true, err
	}
	if err := os.WriteFile(filepath.Join(dir, name), ev, 0o600); err != nil {
		return 0, true, err
	}
	rec.events = append(rec.events, ev)
	rec.info.UpdatedAt = time.Now().UTC()
	if err := st.save(rec); err != nil {
		return idx, true, err
	}
	for ch := range st.subs[id] {
		select {
		case ch <- ev:
		default: // a slow subscriber loses live events, never blocks the server
		}
	}
	return idx, true, nil
}

// events returns the events of id and, if sub is set, subscribes it to
// the live ones atomically (no event is missed or repeated).
func (st *store) eventsAndSubscribe(id string, sub chan json.RawMessage) ([]json.RawMessage, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, ok := st.served(id)
	if !ok {
		return nil, false
	}
	if sub != nil {
		if st.subs[id] == nil {
			st.subs[id] = map[chan json.RawMessage]bool{}
		}
		st.subs[id][sub] = true
	}
	return slices.Clone(rec.events), true
}

func (st *store) unsubscribe(id string, sub chan json.RawMessage) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.subs[id], sub)
}

func (st *store) delete(id string) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.byID[id]; !ok {
		return false, nil
	}
	if st.lease != nil {
		delete(st.lease.held, st.convDir(id))
	}
	delete(st.byID, id)
	st.order = slices.DeleteFunc(st.order, func(x string) bool { return x == id })
	return true, os.RemoveAll(st.convDir(id))
}

func (st *store) setStatus(id, status string) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c, ok := st.served(id)
	if !ok {
		return false, nil
	}
	c.info.ExecutionStatus = status
	c.info.UpdatedAt = time.Now().UTC()
	return true, st.save(c)
}

// list returns copies of the conversations with the given status ("" for
// all), in creation order.
func (st *store) list(status string) []ConversationInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []ConversationInfo
	for _, id := range st.order {
		c := st.byID[id]
		if status == "" || c.info.ExecutionStatus == status {
			out = append(out, c.info)
		}
	}
	return out
}

// persisted returns what conversation id holds on disk for a conversation
// whose create this process did not see (loaded from disk: a fork moved
// here, or a restart): its agent (as base_state.json keeps it) and the
// secret source name, its sealed fields opened (nil when there is none or
// it does not open).
func (st *store) persisted(id, name string) (agent, secret json.RawMessage) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, ok := st.served(id)
	if !ok {
		return nil, nil
	}
	if raw, ok := rec.secrets[name]; ok && name != "" {
		plain, _, good := st.open(raw)
		var kind struct {
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(raw, &kind)
		switch {
		case !good:
		case kind.Kind == "StaticSecret":
			secret, _ = json.Marshal(map[string]string{"kind": "StaticSecret", "value": string(plain)})
		default:
			secret = plain
		}
	}
	return rec.agent, secret
}
