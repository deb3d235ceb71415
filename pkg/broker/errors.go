package broker

import (
	"errors"
	"net/http"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrNotFound is what a Backend returns for an unknown or ended
	// conversation, an unknown secret, git host, LLM profile or OAuth
	// server. From a Client it means the route does not exist (404
	// not_found): a name that does not exist is reported as ErrNotGranted.
	ErrNotFound = errors.New("not found")
	// ErrUnauthenticated is returned by a Client when the broker refused
	// the request before looking at what it asked for (401
	// unauthenticated): no or bad token, a token of another conversation
	// or an old epoch, a peer uid that is not the conversation's, a missing
	// X-OHD-Request header, a browser-origin request.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrNotGranted is returned by a Client when the name asked for is not
	// granted to the conversation or does not exist: the broker answers
	// both the same way (403 not_granted), so a conversation cannot probe
	// which names exist.
	ErrNotGranted = errors.New("not granted")
	// ErrTooLarge is returned by a Client when the request body was over
	// the broker's limit (413 too_large).
	ErrTooLarge = errors.New("request too large")
	// ErrRateLimited is returned by a Client when the conversation is over
	// its request rate or in-flight limit (429 rate_limited).
	ErrRateLimited = errors.New("rate limited")
	// ErrBadRequest is returned by a Client when the broker could not parse
	// the request (400 bad_request, or 405 for a wrong method).
	ErrBadRequest = errors.New("bad request")
	// ErrAuditUnavailable is returned by a Client when ohd could not make
	// the request's audit record durable and refused it (503
	// audit_unavailable); it serves again by itself once it can.
	ErrAuditUnavailable = errors.New("audit unavailable")
	// ErrInvalidToken is returned by ParseToken for a string that is not a
	// well-formed ohd1 token.
	ErrInvalidToken = errors.New("invalid token")
	// ErrInvalidID is returned by Open, Close and WriteToken for a
	// conversation id that is not 1-128 characters of [A-Za-z0-9_-]
	// starting with a letter or digit (ids become path components).
	ErrInvalidID = errors.New("invalid conversation id")
	// ErrClosed is returned by Open and WriteToken after Shutdown.
	ErrClosed = errors.New("broker shut down")
)

// Error codes in error bodies ({"error": "...", "code": "..."}), with the
// HTTP status each is sent with.
const (
	CodeUnauthenticated = "unauthenticated" // 401
	CodeNotGranted      = "not_granted"     // 403: not granted, or does not exist
	CodeNotFound        = "not_found"       // 404: no such route
	CodeBadRequest      = "bad_request"     // 400, or 405 for a wrong method
	CodeTooLarge        = "too_large"       // 413
	CodeRateLimited     = "rate_limited"    // 429, with Retry-After
	CodeInternal        = "internal"        // 500: the backend failed
	CodeBadGateway      = "bad_gateway"     // 502: an LLM provider or OAuth token endpoint failed
	// CodeAuditUnavailable (503, with Retry-After): ohd cannot make audit
	// records durable (its state directory is full), so it hands out
	// nothing until it can.
	CodeAuditUnavailable = "audit_unavailable"
)

// APIError is an error answer of the broker as a Client sees it. It matches
// the sentinel of its code with errors.Is.
type APIError struct {
	Status  int    // HTTP status
	Code    string // one of the Code constants
	Message string // the broker's message; never contains a value
}

func (e *APIError) Error() string {
	return "broker: " + e.Message + " (" + e.Code + ")"
}

// Is reports whether target is the sentinel for e's code.
func (e *APIError) Is(target error) bool {
	switch e.Code {
	case CodeUnauthenticated:
		return target == ErrUnauthenticated
	case CodeNotGranted:
		return target == ErrNotGranted
	case CodeNotFound:
		return target == ErrNotFound
	case CodeTooLarge:
		return target == ErrTooLarge
	case CodeRateLimited:
		return target == ErrRateLimited
	case CodeBadRequest:
		return target == ErrBadRequest
	case CodeAuditUnavailable:
		return target == ErrAuditUnavailable
	}
	return false
}

// refusal is a refused request: what the caller is told (status, code,
// message) and what the audit record says (reason, more precise than the
// message where telling the caller would help an attacker).
type refusal struct {
	status  int
	code    string
	msg     string
	reason  string
	retryIn int // seconds, for 429
}

// Refusals without a per-request part are values, so the refusal paths do
// not allocate.
var (
	refBrowser    = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "browser-origin requests are refused", "browser_origin", 0}
	refNoHeader   = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "missing header X-OHD-Request: 1", "missing_request_header", 0}
	refNoPeer     = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "peer credentials unavailable", "no_peer_credentials", 0}
	refPeerUID    = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "peer uid not permitted on this socket", "peer_uid", 0}
	refNoToken    = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "missing bearer token", "no_token", 0}
	refMalformed  = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "malformed token", "malformed_token", 0}
	refWrongConv  = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "invalid or revoked token", "wrong_conversation", 0}
	refStaleEpoch = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "invalid or revoked token", "stale_epoch", 0}
	refBadMAC     = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "invalid or revoked token", "bad_mac", 0}
	refEnded      = &refusal{http.StatusUnauthorized, CodeUnauthenticated, "conversation ended", "conversation_ended", 0}
	refInFlight   = &refusal{http.StatusTooManyRequests, CodeRateLimited, "too many requests in flight for this conversation", "in_flight", 1}
	refNoRoute    = &refusal{http.StatusNotFound, CodeNotFound, "no such route", "no_route", 0}
	refMethod     = &refusal{http.StatusMethodNotAllowed, CodeBadRequest, "method not allowed", "method", 0}
	refTooLarge   = &refusal{http.StatusRequestEntityTooLarge, CodeTooLarge, "request body too large", "too_large", 0}
	refAudit      = &refusal{http.StatusServiceUnavailable, CodeAuditUnavailable, "ohd cannot write its audit log (is its state directory full?); try again later", "audit_unavailable", 1}
	// refGitUsername: git asked for a username (in the URL) other than
	// the host's configured one; git's credential-store answers nothing
	// then too. The configured username is not told.
	refGitUsername = &refusal{http.StatusForbidden, CodeNotGranted, "the username in the URL is not the one configured for this host: remove it from the URL (https://HOST/...)", "username", 0}
	refInternal    = &refusal{http.StatusInternalServerError, CodeInternal, "internal error; see the ohd log", "backend_error", 0}
	refUpgrade     = &refusal{http.StatusBadRequest, CodeBadRequest, "WebSocket APIs (such as the OpenAI Realtime API) are not supported by ohd's LLM proxy: use the provider's HTTP API (streamed answers work)", "upgrade", 0}
	refBadPath     = &refusal{http.StatusBadRequest, CodeBadRequest, "invalid proxy path", "bad_path", 0}
	refUpstream    = &refusal{http.StatusBadGateway, CodeBadGateway, "llm provider unreachable or failed", "upstream_error", 0}
	refEncoded     = &refusal{http.StatusBadGateway, CodeBadGateway, "llm provider sent an encoded body the broker cannot inspect", "upstream_encoding", 0}
	refOAuthFailed = &refusal{http.StatusBadGateway, CodeBadGateway, "oauth token refresh failed; see the ohd log", "refresh_failed", 0}
	refNoRefresh   = &refusal{http.StatusBadGateway, CodeBadGateway, "oauth access token expired and no refresh token is stored; authorize again on the host", "no_refresh_token", 0}
)

func notGranted(kind string) *refusal {
	return &refusal{http.StatusForbidden, CodeNotGranted, kind + " not granted to this conversation, or it does not exist", "not_granted", 0}
}

func badRequest(msg string) *refusal {
	return &refusal{http.StatusBadRequest, CodeBadRequest, msg, "bad_request", 0}
}

func rateLimited(retry int) *refusal {
	return &refusal{http.StatusTooManyRequests, CodeRateLimited, "request rate over the limit for this conversation", "rate", retry}
}
