package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// This file mediates the agent server's profiles and LLM switches
// (DESIGN §7, "Browsers and profiles" and switch_llm): a create's
// agent_profile_id and title_llm_profile, POST .../switch_llm and POST
// .../switch_profile. The profiles are the upstream's, read with the
// client's key (openhands.Mediator.ResolveAgentProfile, ProfileLLM); each
// key becomes a broker LLM profile of the conversation, and the inner
// server gets the relay's base_url and a placeholder.
//
// A switch adds a broker profile and keeps the earlier ones granted until
// the conversation ends: the agent's other LLMs (a condenser's, the
// title's) and the inner server's LLM registry, which reuses an LLM by
// its usage_id (local_conversation.py L1634-1650), may still use them.

// upstreamFetcher returns the openhands.Fetcher that reads the upstream
// with the key of the client's request r.
func (s *Server) upstreamFetcher(r *http.Request) openhands.Fetcher {
	if s.up == nil {
		return nil
	}
	key := r.Header.Get("X-Session-API-Key")
	return func(ctx context.Context, p string, encrypted bool) (int, []byte, error) {
		u := *s.up.url
		u.Path, u.RawPath = "", ""
		ref, err := url.Parse(p)
		if err != nil {
			return 0, nil, err
		}
		base := strings.TrimSuffix(s.up.url.EscapedPath(), "/")
		full, err := url.Parse(u.String() + base + ref.EscapedPath())
		if err != nil {
			return 0, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, full.String(), nil)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("X-Session-API-Key", key)
		req.Header.Set("Accept", "application/json")
		if encrypted {
			req.Header.Set(openhands.ExposeSecretsHeader, "encrypted")
		}
		resp, err := (&http.Client{Transport: s.up.transport, CheckRedirect: s.client.CheckRedirect}).Do(req)
		if err != nil {
			return 0, nil, fmt.Errorf("%s is unreachable", s.up.name)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20+1))
		if err != nil || len(b) > 4<<20 {
			return 0, nil, fmt.Errorf("%s: the answer could not be read or is over 4 MiB", s.up.name)
		}
		return resp.StatusCode, b, nil
	}
}

// titleProfile is a create's title_llm_profile, resolved: the inner
// server gets the LLM under the same profile name in its own store.
type titleProfile struct {
	name string         // the profile's name, as the body gave it
	llm  map[string]any // mediated: relay base_url, placeholder key
	key  *openhands.LLM // the broker profile to create; nil without a key
}

// resolveProfiles resolves a create body's agent_profile_id (into
// agent_settings, which mediateCreate then mediates) and its
// title_llm_profile. An unknown title profile is dropped from the body:
// the agent server then titles with the agent's LLM, as it does when the
// profile does not load (conversation_service.py L2425-2487).
func (s *Server) resolveProfiles(ctx context.Context, med *openhands.Mediator, cb *createBody, id string) (*titleProfile, error) {
	launched, err := med.ResolveAgentProfile(ctx, cb.fields)
	if err != nil {
		return nil, err
	}
	cb.launched = launched
	raw, ok := cb.fields["title_llm_profile"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var name string
	if json.Unmarshal(raw, &name) != nil {
		return nil, &openhands.Error{Field: "title_llm_profile", Msg: "want a profile name (a string)"}
	}
	if name == "" {
		return nil, nil
	}
	llm, err := med.ProfileLLM(ctx, "title_llm_profile", name)
	var me *openhands.Error
	if asMediationError(err, &me) && me.Status == http.StatusNotFound {
		delete(cb.fields, "title_llm_profile")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	key, err := med.MediateLLM(ctx, id, openhands.ProfileScopedName(id, name), llm, "title_llm_profile")
	if err != nil {
		return nil, err
	}
	return &titleProfile{name: name, llm: llm, key: key}, nil
}

func asMediationError(err error, target **openhands.Error) bool {
	e, ok := err.(*openhands.Error)
	if ok {
		*target = e
	}
	return ok
}

// keepLLM stores a mediated LLM key as broker profile l.Name and clears
// the key.
func (s *Server) keepLLM(l openhands.LLM) error {
	err := s.opts.Secrets.SetSecret(l.Name, l.Key)
	clear(l.Key)
	if err != nil {
		return err
	}
	return s.opts.Secrets.PutLLMProfile(store.LLMProfile{Name: l.Name, Model: l.Model, BaseURL: l.BaseURL, KeySecret: l.Name, AuthHeader: l.AuthHeader})
}

// saveInnerProfile saves llm as LLM profile name in the inner server's
// own store (POST /api/profiles/{name}, profiles_router.py L205-246), so
// that it resolves the name itself (title_llm_profile, switch_profile).
func (s *Server) saveInnerProfile(ctx context.Context, t conversation.Target, name string, llm map[string]any) error {
	body, err := marshal(map[string]any{"llm": llm, "include_secrets": true})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(withTarget(ctx, t), http.MethodPost, "http://"+t.Addr+"/api/profiles/"+url.PathEscape(name), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-API-Key", string(t.InnerKey))
	req.Close = t.Dial == nil
	resp, err := s.client.Do(req)
	if err != nil {
		return errInnerUnreachable
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the conversation's agent server refused to save profile %s: status %d", name, resp.StatusCode)
	}
	return nil
}

// switchTail returns "switch_llm" or "switch_profile" when an escaped
// tail names one of those routes as the inner server routes it, else "".
func switchTail(escaped string) string {
	u, err := url.PathUnescape(escaped)
	if err != nil || !strings.Contains(u, "switch_") { // most tails: no copy
		return ""
	}
	switch c := path.Clean("/" + u); c {
	case "/switch_llm", "/switch_profile":
		return c[1:]
	}
	return ""
}

// postSwitch serves POST /api/conversations/{id}/switch_llm and
// /switch_profile: the new LLM's key becomes a broker profile of the
// conversation, granted to it, and the inner server gets the relay's
// base_url and a placeholder; then the request is forwarded and the inner
// answer returned. Bad input (an unknown profile, a token the upstream's
// key does not open, a provider ohd does not mediate) is refused before
// anything is stored.
func (s *Server) postSwitch(w http.ResponseWriter, r *http.Request, fp forwardPath, route string) {
	body, ok := s.readMediated(w, r, fp)
	if !ok {
		return
	}
	med := s.mediator(r)
	var err error
	var out []byte
	var key *openhands.LLM
	var profile string
	var profileLLM map[string]any
	if route == "switch_llm" {
		var suffix [4]byte
		_, _ = rand.Read(suffix[:])
		out, key, err = med.SwitchLLM(r.Context(), fp.ID, openhands.ScopedName(fp.ID, "llm-"+hex.EncodeToString(suffix[:])), body)
	} else {
		var req struct {
			ProfileName *string `json:"profile_name"`
		}
		if json.Unmarshal(body, &req) != nil || req.ProfileName == nil {
			writeValidation(w, validationError{Type: "missing", Loc: []any{"body", "profile_name"}, Msg: "Field required", Input: nil})
			return
		}
		profile, out = *req.ProfileName, bytes.Clone(body) // body is cleared below
		profileLLM, err = med.ProfileLLM(r.Context(), "profile_name", profile)
		if err == nil {
			key, err = med.MediateLLM(r.Context(), fp.ID, openhands.ProfileScopedName(fp.ID, profile), profileLLM, "profile_name")
		}
	}
	clear(body)
	if err != nil {
		if !writeMediationError(w, err) {
			writeDetail(w, http.StatusBadRequest, err.Error())
		}
		return
	}
	if key != nil {
		g, ok := s.conv.(granter)
		if s.opts.Secrets == nil || !ok {
			clear(key.Key)
			writeDetail(w, http.StatusUnprocessableEntity, "this ohd keeps no secrets: the LLM's key cannot be mediated")
			return
		}
		err := s.keepLLM(*key)
		if err == nil {
			_, err = g.Grant(fp.ID, store.KindLLM, key.Name)
		}
		if err != nil {
			s.log.Warn("conversation API: storing a switched LLM's key failed", "id", fp.ID, "profile", key.Name, "err", err)
			writeDetail(w, http.StatusInternalServerError, "storing LLM profile "+key.Name+" failed: "+scrubLoopback(err.Error()))
			return
		}
	}
	if profileLLM != nil {
		t, err := s.conv.Target(r.Context(), fp.ID)
		if err != nil {
			s.targetError(w, fp.ID, err)
			return
		}
		if t.Addr == "" {
			writeDetail(w, http.StatusNotImplemented, "conversation "+fp.ID+" runs in ohd's local runtime: it has no agent server to switch")
			return
		}
		if err := s.saveInnerProfile(r.Context(), t, profile, profileLLM); err != nil {
			s.log.Warn("conversation API: saving a profile in the inner server failed", "id", fp.ID, "err", err)
			writeDetail(w, http.StatusBadGateway, "conversation "+fp.ID+": "+err.Error())
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	r.Header.Set("Content-Type", "application/json")
	s.forwardTo(w, r, fp.ID, fp.innerPath(), stripAuthQuery(r.URL.RawQuery))
}
