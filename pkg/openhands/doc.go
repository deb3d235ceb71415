// Package openhands holds what ohd knows of the OpenHands agent server:
// the one place the rest of ohd asks instead of re-deriving it. Each
// behaviour cites its section of shared/reference/openhands-agent-server.md
// ("ref §N"), which names the upstream source file and line.
//
// # Where to start
//
// Fernet (ref §1) is the agent server's cipher: NewFernet derives it from
// a key string exactly as the server does (SHA-256 of the string; signing
// key the first half, AES-128 key the second), Encrypt and Decrypt speak
// its tokens, and IsToken recognises one by the server's own prefix.
//
// Mediator (mediate.go) takes the credentials out of what a client sends
// for a conversation (DESIGN §7, secret mediation): Create rewrites a
// StartConversationRequest (the LLM objects of agent and agent_settings,
// ref §1 and §4; the secrets and agent_context.secrets, ref §3; Canvas's
// encrypted settings and LookupSecrets, ref §2a) and Secrets the body of
// POST /api/conversations/{id}/secrets. Each returns the body to forward
// and the LLM profiles and secrets for the broker; the inner server gets
// base_url and LookupSecret URLs on the broker relay inside its own
// container, and PlaceholderKey as its api_key. What ohd cannot mediate
// (MCP credentials, AWS keys, other providers, LookupSecrets that carry a
// credential to another URL) is refused with an Error naming the field.
package openhands
