package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// SecretStore keeps the credentials secret mediation takes out of
// client bodies; *store.Store implements it.
type SecretStore interface {
	SetSecret(name string, value []byte) error
	PutLLMProfile(p store.LLMProfile) error
	PutMCPServer(m store.MCPServer) error
}

// granter adds a grant to a live conversation; *conversation.Manager
// implements it.
type granter interface {
	Grant(id, kind, name string) (store.Conversation, error)
}

func (s *Server) newMediator() *openhands.Mediator {
	m := &openhands.Mediator{Relay: "http://" + broker.RelayAddr}
	for _, k := range s.opts.Keys {
		m.Forbidden = append(m.Forbidden, k)
	}
	if len(s.opts.UpstreamSecretKey) > 0 {
		m.Upstream = openhands.NewFernet(string(s.opts.UpstreamSecretKey))
		m.Forbidden = append(m.Forbidden, s.opts.UpstreamSecretKey)
	}
	if s.up != nil {
		m.Lookup = s.readUpstreamSecret
	}
	return m
}

// mediator returns the Mediator for a request: ohd's own, knowing the
// host the client reached ohd by (an absolute LookupSecret URL on it is
// the upstream's).
func (s *Server) mediator(r *http.Request) *openhands.Mediator {
	m := *s.med
	if r.Host != "" {
		m.Hosts = []string{r.Host}
	}
	m.Fetch = s.upstreamFetcher(r)
	return &m
}

// mediateCreate takes the credentials out of a create body (see
// openhands.Mediator.Create; extra are LLM keys mediated before, such as
// the title profile's): cb's fields are rewritten at once (a body
// ohd will not forward is refused here, before anything exists), and the
// returned store function keeps the LLM keys, secrets and MCP servers as
// conversation id's own ("<id>.<name>") and returns the grants to give it.
// The conversation manager calls it under the conversation's lock, once
// the create's record exists (CreateRequest.Prepare): a retried or
// concurrent create of an existing conversation never reaches it, and
// what it stored ends with the conversation, or with the undo of a failed
// or crashed create (the manager removes every "<id>." credential).
func (s *Server) mediateCreate(ctx context.Context, r *http.Request, cb *createBody, id string, extra ...openhands.LLM) (func(context.Context, string) (store.Grants, error), error) {
	med, err := s.mediator(r).Create(ctx, id, cb.fields)
	if err != nil {
		return nil, err
	}
	med.LLMs = append(med.LLMs, extra...)
	if (len(med.LLMs) > 0 || len(med.Secrets) > 0 || len(med.MCPs) > 0) && s.opts.Secrets == nil {
		return nil, &openhands.Error{Field: "body", Msg: "carries credentials, and this ohd keeps none: they cannot be mediated"}
	}
	cb.fields = med.Fields
	return func(context.Context, string) (store.Grants, error) {
		var g store.Grants
		for _, l := range med.LLMs {
			if err := s.keepLLM(l); err != nil {
				return g, err
			}
			g.Add(store.KindLLM, l.Name)
		}
		for _, sec := range med.Secrets {
			err := s.opts.Secrets.SetSecret(sec.Name, sec.Value)
			clear(sec.Value)
			if err != nil {
				return g, err
			}
			g.Add(store.KindSecret, sec.Name)
		}
		// An MCP server's header values are secrets that only its proxy
		// reads: granted as the server, never as secrets the container
		// could read.
		for _, m := range med.MCPs {
			rec := store.MCPServer{Name: m.Name, URL: m.URL}
			for _, h := range m.Headers {
				err := s.opts.Secrets.SetSecret(h.Secret, h.Value)
				clear(h.Value)
				if err != nil {
					return g, err
				}
				rec.Headers = append(rec.Headers, store.MCPHeader{Name: h.Name, Secret: h.Secret})
			}
			if err := s.opts.Secrets.PutMCPServer(rec); err != nil {
				return g, err
			}
			g.Add(store.KindMCP, m.Name)
		}
		return g, nil
	}, nil
}

// writeMediationError answers a body ohd will not forward (422, in
// FastAPI's validation shape, naming the field; a profile the upstream
// does not have 404, and an upstream that failed 502, as {"detail"}).
func writeMediationError(w http.ResponseWriter, err error) bool {
	var me *openhands.Error
	if !errors.As(err, &me) {
		return false
	}
	if me.Status != 0 && me.Status != http.StatusUnprocessableEntity {
		writeDetail(w, me.Status, me.Field+": "+me.Msg)
		return true
	}
	writeValidation(w, validationError{Type: "value_error", Loc: []any{"body", me.Field}, Msg: me.Msg, Input: nil})
	return true
}

// readMediated reads the body of a mediated POST to conversation fp.ID
// (secrets, switch_llm, switch_profile), bounded by MaxBody; it answers
// 404 for a conversation the client cannot see and 413 for a body too
// large, and then returns false.
func (s *Server) readMediated(w http.ResponseWriter, r *http.Request, fp forwardPath) ([]byte, bool) {
	if _, ok := s.visible(fp.ID); !ok {
		writeDetail(w, http.StatusNotFound, "Not Found: no conversation "+fp.ID)
		return nil, false
	}
	if r.ContentLength > s.opts.MaxBody {
		writeTooLarge(w, s.opts.MaxBody)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		writeTooLarge(w, s.opts.MaxBody)
		return nil, false
	}
	return body, true
}

// postSecrets serves POST /api/conversations/{id}/secrets (ref §3): the
// values go to the broker as the conversation's own secrets, granted to
// it, and the inner server gets LookupSecrets on the relay in their
// place.
func (s *Server) postSecrets(w http.ResponseWriter, r *http.Request, fp forwardPath) {
	body, ok := s.readMediated(w, r, fp)
	if !ok {
		return
	}
	out, secrets, err := s.mediator(r).Secrets(r.Context(), fp.ID, body)
	clear(body)
	if err != nil {
		if !writeMediationError(w, err) {
			writeDetail(w, http.StatusBadRequest, err.Error())
		}
		return
	}
	g, ok := s.conv.(granter)
	if len(secrets) > 0 && (s.opts.Secrets == nil || !ok) {
		writeDetail(w, http.StatusUnprocessableEntity, "this ohd keeps no secrets: they cannot be mediated")
		return
	}
	for _, sec := range secrets {
		err := s.opts.Secrets.SetSecret(sec.Name, sec.Value)
		clear(sec.Value)
		if err == nil {
			_, err = g.Grant(fp.ID, store.KindSecret, sec.Name)
		}
		if err != nil {
			s.log.Warn("conversation API: storing a mediated secret failed", "id", fp.ID, "secret", sec.Name, "err", err)
			writeDetail(w, http.StatusInternalServerError, "storing secret "+sec.Name+" failed: "+scrubLoopback(err.Error()))
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	r.Header.Set("Content-Type", "application/json")
	s.forwardTo(w, r, fp.ID, fp.innerPath(), stripAuthQuery(r.URL.RawQuery))
}
