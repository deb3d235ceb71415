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
// The inner contract (ref §5-6): what the agent server's image needs to
// run as a uid that is not its own, with its state on the host. DirsOf is
// a conversation's host layout under ohd's <state-dir>/inner:
//
//	<state-dir>/inner/<id>/                   0700, the conversation's uid (the repository owner)
//	<state-dir>/inner/<id>/persistence/       HOME
//	    .openhands/                           OH_PERSISTENCE_DIR ($HOME/.openhands, as the real server's
//	                                          profile router and switch_profile both need): settings, secrets, profiles
//	<state-dir>/inner/<id>/conversations/     OH_CONVERSATIONS_PATH
//	    <id.hex>/meta.json, base_state.json, events/event-NNNNN-<event-id>.json
//	<state-dir>/inner/<id>/bash_events/       OH_BASH_EVENTS_DIR: the terminal's events
//
// each directory (InnerDirs.Mounted: persistence, conversations, bash_events) bind-mounted read-write at its own
// path. paths.go is the table of every default path of the server, with
// its source line and what ohd does with it. Env is the
// environment (HOME, OH_PERSISTENCE_DIR, OH_CONVERSATIONS_PATH, OH_BASH_EVENTS_DIR,
// OH_CONVERSATION_RUNTIME=local, GIT_TERMINAL_PROMPT=0: paths, no
// values), Args the arguments after the image's entrypoint (--host
// 0.0.0.0 --port 8000). The two keys, SessionKeyEnv (per start) and
// SecretKeyEnv (the cipher key of the server's persisted secrets, stable
// for the conversation's life), reach the server's process only, through
// 0400 files that ohctl inner-exec --env-file reads. CheckExtraEnv vets an
// operator's --inner-env (IsSecretKey is the server's is_secret_key).
// DefaultImage is the pinned release ohd runs by default; BuildCommand
// builds such an image from the agent server's own Dockerfile
// (ImageDockerfile). ContractVersion is the agent server API version ohd
// implements (its /server_info "version"), AcceptedVersion Canvas's check
// of it (ref §10).
//
// ReadInfo renders a conversation's ConversationInfo from those files
// while no container runs (ref §5 "Metadata reads"), exactly the model's
// fields (InfoFields) as the live server composes them, secrets redacted,
// never following a symlink the agent planted. TrimSkills trims its
// skills unless IncludeSkills (the query include_skills) says not to, as
// the server does for every ConversationInfo it answers.
//
// Fork (fork.go, ref §10): the source's inner server forks a
// conversation under the new id; CopyForkState moves those files into the
// fork's own inner state, rewritten by a ForkMove (relay credential names,
// host paths, tokens sealed again for the fork's cipher).
//
// The create body (ref §2, §8): WorktreeGuidance is the server's own
// worktree text (PlainFolderGuidance ohd's for a folder without git),
// AppendSystemMessageSuffix adds it to the agent's
// system_message_suffix as the server does. IsolatedWorkingDir is the
// working_dir of Canvas's isolated mode (ref §10). PortPath,
// LegacyPortPath and ScopedPortRoutes place VS Code and the desktop. The workspace cookie (ref §8):
// WorkspaceCookie, IsWorkspaceTail, WorkspaceSessionCookie and
// SecureContext.
// Mediator (mediate.go) takes the credentials out of what a client sends
// for a conversation (DESIGN §7, secret mediation): Create rewrites a
// StartConversationRequest (the LLM objects of agent and agent_settings,
// ref §1 and §4; the secrets and agent_context.secrets, ref §3; Canvas's
// encrypted settings and LookupSecrets, ref §2a) and Secrets the body of
// POST /api/conversations/{id}/secrets. Each returns the body to forward
// and the LLM profiles and secrets for the broker; the inner server gets
// base_url and LookupSecret URLs on the broker relay inside its own
// container, and PlaceholderKey as its api_key. A remote MCP server's
// credentials (headers and auth of mcp_config, mcp.go) become an MCP
// server of the broker, and the inner server gets the relay's
// /mcp/<name> as the server's url, with no credential. What ohd cannot
// mediate (a stdio MCP server's secret environment, OAuth and SSE MCP
// servers, an LLM's AWS keys or extra_headers with a secret name, with or
// without an api_key, other providers, LookupSecrets that carry a
// credential to another URL) is refused with an Error naming the field.
// Profiles (profiles.go, citing the server's source): ResolveAgentProfile
// turns a create's agent_profile_id into agent_settings from the
// upstream's agent and LLM profiles (read through Mediator.Fetch),
// ProfileLLM reads an upstream LLM profile (title_llm_profile,
// switch_profile), MediateLLM mediates one LLM object under a given
// broker name, and SwitchLLM the body of switch_llm.
package openhands
