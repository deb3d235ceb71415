package openhands

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// PlaceholderKey is the api_key the inner server's LLM gets in place of
// the real one: non-empty, because litellm refuses an Anthropic call
// without a key (ref §4, "The placeholder api_key must be non-empty").
// The broker drops it and injects the real key.
const PlaceholderKey = "ohd-broker-injects-the-key"

// Mediator rewrites what a client sends for a conversation so that no
// credential reaches its container as a value (DESIGN §7, secret
// mediation): each LLM key becomes an LLM profile and each other secret a
// broker secret, both granted to that conversation only, and the inner
// server is pointed at the broker relay inside its own container (Relay)
// for both. Its zero value accepts only plaintext and no upstream
// lookups.
type Mediator struct {
	// Upstream opens the Fernet tokens the operator's own agent server
	// (the upstream) puts into the settings Canvas copies into a create
	// body (ref §2a step 3, §1 "Fields that hold Fernet tokens"). nil: a
	// token in a body is refused, naming --upstream-secret-key-file.
	Upstream *Fernet
	// Lookup reads the upstream's saved secret name with the headers of
	// the client's LookupSecret (Canvas puts its session key there, ref
	// §2a step 5, §3). nil: there is no upstream, and such a lookup is
	// refused naming --upstream.
	Lookup func(ctx context.Context, name string, headers map[string]string) ([]byte, error)
	// Hosts are the host[:port] forms clients reach ohd by: an absolute
	// LookupSecret URL on one of them counts as ohd's (the upstream's)
	// own /api/settings/secrets/<NAME>.
	Hosts []string
	// Forbidden are values that must never reach a container whatever a
	// body carries: ohd's session keys, the upstream's secret key. A body
	// that still holds one after mediation is refused.
	Forbidden [][]byte
	// Relay is the broker relay's base URL as the inner server reaches it
	// (inside its container), e.g. "http://127.0.0.1:8751".
	Relay string
	// Fetch reads the upstream's profiles and settings with the client's
	// key (profiles.go). nil: there is no upstream, and a profile is
	// refused as not found, naming --upstream.
	Fetch Fetcher
}

// LLM is an LLM key taken out of a body: the broker profile to create.
type LLM struct {
	// Name is the profile's broker name: "<conversation-id>.llm" (then
	// ".llm-2", ...), granted to that conversation only.
	Name  string
	Model string
	// BaseURL is the provider's, as the body gave it or the provider's
	// default (ref §4).
	BaseURL string
	// AuthHeader is "" for "Authorization: Bearer" (OpenAI style) or
	// "x-api-key" (Anthropic, ref §4b).
	AuthHeader string
	Key        []byte
}

// Secret is a secret value taken out of a body: the broker secret to
// create, "<conversation-id>.<NAME>", granted to that conversation only.
type Secret struct {
	Name  string
	Value []byte
}

// Mediated is a create body after mediation.
type Mediated struct {
	// Fields are the body's fields, rewritten.
	Fields  map[string]json.RawMessage
	LLMs    []LLM
	Secrets []Secret
	MCPs    []MCP
}

// Error is a body ohd will not forward: Field says where (a dotted path),
// Msg what is wrong and what to do. It never holds a value. Status is the
// HTTP status to answer: 0 for 422 (a body ohd refuses), 404 for a
// profile the upstream does not have (as the agent server answers it),
// 502 when the upstream could not be read.
type Error struct {
	Status     int
	Field, Msg string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// ScopedName returns the broker name of a conversation's own secret or
// profile: "<id>.<name>".
func ScopedName(id, name string) string { return id + "." + name }

// Create mediates the fields of a StartConversationRequest for
// conversation id: the LLM objects of agent and agent_settings (api_key,
// plaintext from the SDK or a token from Canvas, ref §1, §2), the
// top-level secrets and agent_context.secrets (StaticSecret values and
// LookupSecrets on the upstream's settings, ref §3), and the credentials
// of remote MCP servers in mcp_config (mcp.go); secrets_encrypted is
// dropped, since nothing encrypted is left. A stdio MCP server's secret
// environment and OAuth MCP servers are refused: they run inside the
// container, so their credentials would have to be there.
func (m *Mediator) Create(ctx context.Context, id string, fields map[string]json.RawMessage) (*Mediated, error) {
	st := &mediation{m: m, id: id, ctx: ctx, llmByKey: map[string]string{}, secretByName: map[string][]byte{}}
	out := make(map[string]json.RawMessage, len(fields))
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names) // the same body gives the same profiles and secrets, in order
	decoded := map[string]any{}
	for _, k := range names {
		raw := fields[k]
		switch k {
		case "secrets_encrypted":
			continue
		case "agent", "agent_settings", "secrets":
			v, err := decode(raw)
			if err != nil {
				return nil, &Error{Field: k, Msg: "not valid JSON"}
			}
			if k == "secrets" {
				if err := st.secretsMap(v, k, false); err != nil {
					return nil, err
				}
			} else if err := st.agent(v, k); err != nil {
				return nil, err
			}
			decoded[k] = v
		default:
			out[k] = raw
		}
	}
	// MCP headers may refer to the body's secrets: all are known now.
	if err := st.resolveMCP(); err != nil {
		return nil, err
	}
	for k, v := range decoded {
		b, err := encode(v)
		if err != nil {
			return nil, err
		}
		out[k] = b
	}
	for k, raw := range out {
		if err := st.check(raw, k); err != nil {
			return nil, err
		}
	}
	return &Mediated{Fields: out, LLMs: st.llms, Secrets: st.secrets, MCPs: st.mcpOut}, nil
}

// Secrets mediates the body of POST /api/conversations/{id}/secrets,
// {"secrets": {NAME: "value" | {"value": "..."} | SecretSource}} (ref
// §3): every value becomes a broker secret, the inner server gets
// LookupSecrets on the relay. It returns the body to forward.
func (m *Mediator) Secrets(ctx context.Context, id string, body []byte) ([]byte, []Secret, error) {
	v, err := decode(body)
	if err != nil {
		return nil, nil, &Error{Field: "body", Msg: "not valid JSON"}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, &Error{Field: "body", Msg: `want a JSON object {"secrets": {NAME: value}}`}
	}
	st := &mediation{m: m, id: id, ctx: ctx, llmByKey: map[string]string{}}
	if err := st.secretsMap(obj["secrets"], "secrets", true); err != nil {
		return nil, nil, err
	}
	out, err := encode(obj)
	if err != nil {
		return nil, nil, err
	}
	if err := st.check(out, "body"); err != nil {
		return nil, nil, err
	}
	return out, st.secrets, nil
}

type mediation struct {
	m        *Mediator
	id       string
	ctx      context.Context
	llms     []LLM
	llmByKey map[string]string
	secrets  []Secret
	// secretByName holds the values of the body's secrets by the name
	// the body gave them, for ${NAME} in MCP headers.
	secretByName map[string][]byte
	mcps         []pendingMCP
	mcpOut       []MCP
	// taken are other values taken out of the body (MCP credentials),
	// which must not be left elsewhere in it.
	taken [][]byte
	// fixedName, if set, is the broker name of the (one) LLM key
	// mediated: a switched LLM's or a profile's (profiles.go).
	fixedName string
}

func decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// agent walks an agent (or agent_settings) value: every object with a
// string "model" is an LLM (agent.llm, a condenser's llm, ...: ref §1
// "LLM objects, wherever they occur"), whether or not it has an api_key,
// since its other credential fields (aws_*, secret extra_headers) reach
// the container as well.
func (st *mediation) agent(v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["model"].(string); ok {
			if err := st.llm(x, path); err != nil {
				return err
			}
		} else if _, ok, err := st.secretValue(x["api_key"], path+".api_key"); err != nil || ok {
			// An LLM without a model (the SDK then uses its default one),
			// or any other object with a key: not mediated, so refused.
			if err == nil {
				err = &Error{Field: path + ".api_key", Msg: "an api_key outside an LLM object with a model: ohd cannot mediate it and will not pass it to the container; give the LLM its model"}
			}
			return err
		}
		for _, k := range sortedKeys(x) {
			p := path + "." + k
			switch k {
			case "mcp_config":
				if err := st.mcpConfig(x[k], p); err != nil {
					return err
				}
				continue
			case "secrets":
				if strings.HasSuffix(path, "agent_context") {
					if err := st.secretsMap(x[k], p, true); err != nil {
						return err
					}
					continue
				}
			}
			if err := st.agent(x[k], p); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := st.agent(e, fmt.Sprintf("%s.%d", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// redacted is how the agent server shows a secret it will not disclose
// (ref §1): no value.
const redacted = "**********"

// secretValue reads a SecretStr field: plaintext, or a token under the
// upstream's key. ok is false for no value (null, empty, redacted).
func (st *mediation) secretValue(v any, path string) (val []byte, ok bool, err error) {
	if v == nil {
		return nil, false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return nil, false, &Error{Field: path, Msg: "want a string"}
	}
	if strings.TrimSpace(s) == "" || s == redacted {
		return nil, false, nil
	}
	if !IsToken(s) {
		return []byte(s), true, nil
	}
	if st.m.Upstream == nil {
		return nil, false, &Error{Field: path, Msg: "is encrypted (a Fernet token of the upstream agent server) but ohd has no key to open it: start ohd with --upstream-secret-key-file holding the upstream's OH_SECRET_KEY"}
	}
	pt, err := st.m.Upstream.Decrypt(s)
	if err != nil {
		return nil, false, &Error{Field: path, Msg: "is a Fernet token that the upstream's key does not open: --upstream-secret-key-file must hold the OH_SECRET_KEY of the agent server given as --upstream"}
	}
	return pt, true, nil
}

// awsFields are the LLM's AWS credentials (ref §1, LLM_SECRET_FIELDS):
// Bedrock is not mediated.
var awsFields = []string{"aws_access_key_id", "aws_secret_access_key", "aws_session_token"}

// openAICompatible are litellm provider prefixes that take the key as
// "Authorization: Bearer" on an OpenAI-style API; they need a base_url
// unless listed in defaultBase.
var openAICompatible = map[string]bool{
	"": true, "openai": true, "litellm_proxy": true, "openhands": true, "openrouter": true,
	"deepseek": true, "groq": true, "mistral": true, "hosted_vllm": true, "together_ai": true,
	"xai": true, "fireworks_ai": true, "ollama_chat": true,
}

// defaultBase are the providers' default base URLs (ref §4: the OpenAI
// client's default; litellm's Anthropic default; the OpenHands proxy).
var defaultBase = map[string]string{
	"":              "https://api.openai.com/v1",
	"openai":        "https://api.openai.com/v1",
	"anthropic":     "https://api.anthropic.com",
	"litellm_proxy": "https://llm-proxy.app.all-hands.dev",
	"openhands":     "https://llm-proxy.app.all-hands.dev",
}

// llm mediates an LLM object: its api_key becomes a broker profile. The
// credentials ohd does not mediate (aws_*, extra_headers with a secret
// name) are refused first, with or without an api_key.
func (st *mediation) llm(obj map[string]any, path string) error {
	for _, f := range awsFields {
		if v, _, err := st.secretValue(obj[f], path+"."+f); err != nil || v != nil {
			return &Error{Field: path + "." + f, Msg: "AWS credentials are not mediated by ohd (only OpenAI-compatible and Anthropic providers are); use a provider ohd mediates"}
		}
	}
	if err := st.extraHeaders(obj["extra_headers"], path+".extra_headers"); err != nil {
		return err
	}
	key, ok, err := st.secretValue(obj["api_key"], path+".api_key")
	if err != nil || !ok {
		return err
	}
	model := obj["model"].(string)
	provider, _, hasPrefix := strings.Cut(model, "/")
	if !hasPrefix {
		provider = ""
	}
	base, _ := obj["base_url"].(string)
	if obj["base_url"] != nil && base == "" {
		if _, isStr := obj["base_url"].(string); !isStr {
			return &Error{Field: path + ".base_url", Msg: "want a string"}
		}
	}
	header := ""
	switch {
	case provider == "anthropic":
		// litellm sends OAuth tokens of Anthropic as a bearer token
		// (ref §4b).
		if !bytes.HasPrefix(key, []byte("sk-ant-oat")) {
			header = "x-api-key"
		}
	case openAICompatible[provider]:
	default:
		return &Error{Field: path + ".model", Msg: fmt.Sprintf("provider %q: ohd mediates the keys of OpenAI-compatible providers (openai/, litellm_proxy/, openrouter/, ...) and anthropic/ only, so it cannot keep this key out of the container", provider)}
	}
	if base == "" {
		base = defaultBase[provider]
		if base == "" {
			return &Error{Field: path + ".base_url", Msg: fmt.Sprintf("provider %q has no default base URL ohd knows: set llm.base_url", provider)}
		}
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return &Error{Field: path + ".base_url", Msg: "want an http(s) URL without credentials"}
	}
	dedupe := header + "\x00" + base + "\x00" + string(key)
	name, seen := st.llmByKey[dedupe]
	if !seen {
		name = ScopedName(st.id, "llm")
		if n := len(st.llms); n > 0 {
			name = fmt.Sprintf("%s-%d", name, n+1)
		}
		if st.fixedName != "" {
			name = st.fixedName
			if n := len(st.llms); n > 0 {
				name = fmt.Sprintf("%s-%d", name, n+1)
			}
		}
		st.llmByKey[dedupe] = name
		st.llms = append(st.llms, LLM{Name: name, Model: model, BaseURL: base, AuthHeader: header, Key: key})
	}
	obj["base_url"] = st.m.Relay + "/llm/" + name
	obj["api_key"] = PlaceholderKey
	return nil
}

// extraHeaders refuses an LLM's extra_headers entry whose name the agent
// server treats as secret (IsSecretKey) and that has a value: litellm
// sends it from inside the container, so the credential would be there,
// and the broker injects only the profile's own key.
func (st *mediation) extraHeaders(v any, path string) error {
	if v == nil {
		return nil
	}
	h, ok := v.(map[string]any)
	if !ok {
		return &Error{Field: path, Msg: "want an object {header: value}"}
	}
	for _, k := range sortedKeys(h) {
		if !IsSecretKey(k) {
			continue
		}
		if s, isStr := h[k].(string); h[k] == nil || isStr && (strings.TrimSpace(s) == "" || s == redacted) {
			continue
		}
		return &Error{Field: path + "." + k, Msg: "a credential in an LLM's extra_headers would reach the container: ohd does not mediate it; give the key as the LLM's api_key (the broker sends it) or remove the header"}
	}
	return nil
}

// secretsMap mediates a {NAME: source} map. plainStrings allows a bare
// string as a value (agent_context.secrets, the secrets route); in the
// create body's top-level secrets a source object is required (ref §3).
func (st *mediation) secretsMap(v any, path string, plainStrings bool) error {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return &Error{Field: path, Msg: "want an object {NAME: secret}"}
	}
	for _, name := range sortedKeys(m) {
		p := path + "." + name
		src, err := st.secret(name, m[name], p, plainStrings)
		if err != nil {
			return err
		}
		if src != nil {
			m[name] = src
		}
	}
	return nil
}

// secret mediates one secret source and returns its replacement (nil:
// keep it as it is).
func (st *mediation) secret(name string, v any, path string, plainStrings bool) (any, error) {
	var value []byte
	var desc any
	switch x := v.(type) {
	case string:
		if !plainStrings {
			return nil, &Error{Field: path, Msg: `want a secret source {"kind": "StaticSecret", "value": ...} or {"kind": "LookupSecret", "url": ...}`}
		}
		val, ok, err := st.secretValue(x, path)
		if err != nil || !ok {
			return nil, err
		}
		value = val
	case map[string]any:
		desc = x["description"]
		kind, _ := x["kind"].(string)
		switch {
		case kind == "StaticSecret" || (kind == "" && plainStrings && x["value"] != nil):
			val, ok, err := st.secretValue(x["value"], path+".value")
			if err != nil || !ok {
				return nil, err
			}
			value = val
		case kind == "LookupSecret":
			val, mediate, err := st.lookup(x, path)
			if err != nil || !mediate {
				return nil, err
			}
			value = val
		default:
			return nil, &Error{Field: path, Msg: `unknown secret kind: want "StaticSecret" or "LookupSecret"`}
		}
	case nil:
		return nil, nil
	default:
		return nil, &Error{Field: path, Msg: "want a string or a secret source object"}
	}
	if !validSecretName(name) || len(ScopedName(st.id, name)) > 128 {
		return nil, &Error{Field: path, Msg: "a secret name is 1-91 characters of A-Z a-z 0-9 . _ - (not starting with . or -)"}
	}
	bn := ScopedName(st.id, name)
	st.secrets = append(st.secrets, Secret{Name: bn, Value: value})
	if st.secretByName != nil {
		st.secretByName[name] = value
	}
	out := map[string]any{"kind": "LookupSecret", "url": st.m.Relay + "/secrets/" + bn, "headers": map[string]any{}}
	if desc != nil {
		out["description"] = desc
	}
	return out, nil
}

// settingsSecretsPath is the upstream's saved-secret route (ref §3:
// settings_router.py L457-488).
const settingsSecretsPath = "/api/settings/secrets/"

// lookup handles a LookupSecret: one on the upstream's settings secrets
// (Canvas's, with its session key in the headers) is read now and becomes
// a broker secret; another URL is kept as it is when its headers carry no
// credential, and refused otherwise (ohd will not put one into a
// container, nor fetch arbitrary URLs from the host).
func (st *mediation) lookup(x map[string]any, path string) ([]byte, bool, error) {
	raw, _ := x["url"].(string)
	headers := map[string]string{}
	if h, ok := x["headers"].(map[string]any); ok {
		for k, hv := range h {
			s, isStr := hv.(string)
			if !isStr {
				return nil, false, &Error{Field: path + ".headers." + k, Msg: "want a string"}
			}
			if IsToken(s) && st.m.Upstream != nil {
				if pt, err := st.m.Upstream.Decrypt(s); err == nil {
					s = string(pt)
				}
			}
			headers[k] = s
		}
	} else if x["headers"] != nil {
		return nil, false, &Error{Field: path + ".headers", Msg: "want an object"}
	}
	u, err := url.Parse(raw)
	if raw == "" || err != nil {
		return nil, false, &Error{Field: path + ".url", Msg: "want a URL"}
	}
	own := u.Host == "" || hostIn(u.Host, st.m.Hosts)
	if own && strings.HasPrefix(u.EscapedPath(), settingsSecretsPath) {
		name, err := url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), settingsSecretsPath))
		if err != nil || name == "" || strings.Contains(name, "/") {
			return nil, false, &Error{Field: path + ".url", Msg: "want /api/settings/secrets/<NAME>"}
		}
		if st.m.Lookup == nil {
			return nil, false, &Error{Field: path + ".url", Msg: "names the agent server's saved secrets, but ohd has no upstream agent server: start ohd with --upstream"}
		}
		v, err := st.m.Lookup(st.ctx, name, headers)
		if err != nil {
			return nil, false, &Error{Field: path + ".url", Msg: "reading the saved secret " + name + " from the upstream agent server failed: " + err.Error()}
		}
		return v, true, nil
	}
	for k, hv := range headers {
		if IsSecretKey(k) && hv != "" {
			return nil, false, &Error{Field: path + ".headers." + k, Msg: "a LookupSecret with a credential in its headers would put that credential into the container; store the value with ohd (ohctl secret set) or send it as a StaticSecret"}
		}
	}
	return nil, false, nil
}

func hostIn(h string, hosts []string) bool {
	for _, x := range hosts {
		if strings.EqualFold(h, x) {
			return true
		}
	}
	return false
}

// IsSecretKey reports whether a header or variable name is one the agent
// server treats as secret (ref §1: is_secret_key, utils/redact.py
// L27-79): it contains, case-insensitively, AUTHORIZATION, COOKIE,
// CREDENTIAL, KEY, PASSWORD, SECRET, SESSION or TOKEN.
func IsSecretKey(k string) bool {
	u := strings.ToUpper(k)
	for _, s := range []string{"AUTHORIZATION", "COOKIE", "CREDENTIAL", "KEY", "PASSWORD", "SECRET", "SESSION", "TOKEN"} {
		if strings.Contains(u, s) {
			return true
		}
	}
	return false
}

// check refuses a rewritten field that still holds what must not reach a
// container: a token the upstream's key opens, a forbidden key, or a
// value ohd took out elsewhere. The inner server sees the field decoded,
// so the check runs on every decoded string (object keys and values),
// where a JSON escape (\u006f for o, \/ for /) no longer hides a value;
// the raw bytes are checked as well.
func (st *mediation) check(raw json.RawMessage, field string) error {
	var vals [][]byte
	for _, l := range st.llms {
		vals = append(vals, l.Key)
	}
	for _, s := range st.secrets {
		vals = append(vals, s.Value)
	}
	vals = append(vals, st.taken...)
	forbidden := &Error{Field: field, Msg: "holds one of ohd's keys (a session API key or the upstream's secret key); ohd never passes them to a conversation: remove it"}
	copied := &Error{Field: field, Msg: "holds a secret value outside the fields ohd mediates (LLM api_key, secrets, agent_context.secrets, MCP credentials); remove the copy"}
	holds := func(s []byte) error {
		for _, f := range st.m.Forbidden {
			if len(f) > 0 && bytes.Contains(s, f) {
				return forbidden
			}
		}
		for _, v := range vals {
			if len(v) >= 4 && bytes.Contains(s, v) {
				return copied
			}
		}
		return nil
	}
	if err := holds(raw); err != nil {
		return err
	}
	v, err := decode(raw)
	if err != nil {
		return &Error{Field: field, Msg: "not valid JSON"}
	}
	return walkStrings(v, field, func(s, path string) error {
		if err := holds([]byte(s)); err != nil {
			return err
		}
		if st.m.Upstream != nil && upstreamToken(s, st.m.Upstream) {
			return &Error{Field: path, Msg: "is encrypted with the upstream's key in a field ohd does not mediate; ohd will not pass it (or what it holds) into a container: remove it"}
		}
		return nil
	})
}

// walkStrings calls fn on every string of a decoded JSON value, object
// keys included (path is the key's own path), in a stable order, and
// returns its first error.
func walkStrings(v any, path string, fn func(s, path string) error) error {
	switch x := v.(type) {
	case string:
		return fn(x, path)
	case map[string]any:
		for _, k := range sortedKeys(x) {
			p := path + "." + k
			if err := fn(k, p); err != nil {
				return err
			}
			if err := walkStrings(x[k], p, fn); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := walkStrings(e, fmt.Sprintf("%s.%d", path, i), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// upstreamToken reports whether s is, or holds (as in "Bearer <token>"),
// a Fernet token that the upstream's key opens.
func upstreamToken(s string, f *Fernet) bool {
	for rest := s; ; {
		i := strings.Index(rest, TokenPrefix)
		if i < 0 {
			return false
		}
		rest = rest[i:]
		n := 0
		for n < len(rest) && isBase64URL(rest[n]) {
			n++
		}
		if _, err := f.Decrypt(rest[:n]); err == nil {
			return true
		}
		rest = rest[len(TokenPrefix):]
	}
}

func isBase64URL(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '='
}

func validSecretName(s string) bool {
	if s == "" || len(s) > 91 || s[0] == '.' || s[0] == '-' {
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

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
