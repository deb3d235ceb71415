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
package openhands
