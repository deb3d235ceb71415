package openhands

// BashEventsDirEnv is the variable of the agent server's bash events
// directory (config.py L272-276 @v1.43.1, field bash_events_dir).
const BashEventsDirEnv = "OH_BASH_EVENTS_DIR"

// LeaseTTLEnv is the variable of the agent server's conversation lease TTL
// (config.py L386-398 @v1.43.1, field lease_ttl_seconds, default 45 s).
// ohd sets it to 0, which disables the lease (event_service.py L982-990),
// the setting the server documents for "single-instance deployments where
// concurrent ownership is impossible": each conversation's directories
// belong to one container at a time, as ohd starts it (a start shares one
// attempt, a new container only after the old one is gone). With the
// lease on, a container started again after a crash or docker rm -f
// serves its conversation only after 45 s: the dead server's lease names
// the same hostname (runtime.HostnameOf) but the new server's process gets
// the same pid in its new pid namespace, or the old pid is a live process
// there, and conversation_lease.py L166-185 then counts the owner alive
// (TestBackendInnerStateSurvivesContainer's crash case, with the stand-in's
// lease).
const LeaseTTLEnv = "OH_LEASE_TTL_SECONDS"

// The agent server's default paths (read from its source, v1.43.1; ref §6
// "Default paths", §9). Its image runs it from WORKDIR / with /workspace
// owned by its own uid 10001, so every relative default lands under
// /workspace, which the conversation's uid (the repository owner) cannot
// write. Each path the server writes is moved to a host directory of the
// conversation (DirsOf, bind-mounted at its own path, owned by that uid)
// by a variable of Env; the others are read-only, absolute and writable,
// or unused, as the table says.
//
//	path (default)                          source (@v1.43.1)                              ohd
//	conversations_path                      agent_server/config.py L252-257                OH_CONVERSATIONS_PATH=<inner>/<id>/conversations
//	  (workspace/conversations)             conversation_service.py L1950 (mkdir at start)
//	bash_events_dir                         agent_server/config.py L272-277                OH_BASH_EVENTS_DIR=<inner>/<id>/bash_events
//	  (workspace/bash_events)               bash_service.py L54-56 (mkdir on every use)
//	settings, secrets, workspaces.json      agent_server/persistence/store.py L240,        OH_PERSISTENCE_DIR=<inner>/<id>/persistence/.openhands
//	  (workspace/.openhands)                L801-812
//	LLM and agent profiles                  persistence/store.py L815-826;                 OH_PERSISTENCE_DIR (profiles/ under it),
//	  (~/.openhands/profiles)               sdk/llm/llm_profile_store.py L27;              which is $HOME/.openhands: a conversation's
//	                                        ref §10 (switch_profile reads ~/.openhands)    switch_profile reads there whatever the env says
//	installed Canvas extensions             agent_server/canvas_extensions/installed.py    HOME=<inner>/<id>/persistence
//	  (~/.openhands/canvas-extensions)      L46
//	the SDK's caches, auth, hooks, plugins  sdk/context/prompts/prompt.py L64,             HOME
//	  (~/.openhands/..., ~/.cache/...)      sdk/llm/auth/credentials.py L25,
//	                                        sdk/extensions/installation/manager.py L24,
//	                                        sdk/plugin/fetch.py L19, sdk/hooks/config.py L295
//	VS Code's user data                     openvscode-server's own default                HOME
//	  (~/.openvscode-server)
//	the desktop's ~/.vnc, ~/.config,        agent_server/desktop_service.py L35-49         HOME
//	  ~/Downloads
//	/api/file/home                          agent_server/file_router.py L775               HOME (the answer names it)
//	config file (workspace/openhands_       agent_server/config.py L26-27, L424-443        not set: read only, and only if it exists;
//	  agent_server_config.json)                                                            an image's own file is its own choice
//	workspace_path (workspace/project)      agent_server/config.py L258-263                not set: no code of the server reads it
//	conversation_worktree_root              agent_server/config.py L264-271,               not set: absolute; used only for a create
//	  (/tmp/conversation-worktrees)         conversation_service.py L197-263               with worktree, which ohd removes from
//	                                                                                       every create body (ohd makes the worktree)
//	TMUX_TMPDIR (<tempdir>/openhands-       agent_server/api.py L104-116                   not set: /tmp, writable (a tmpfs with
//	  agent-server-<pid>)                                                                  --read-only-rootfs)
//	a conversation's persistence_dir        agent_server/models.py L134-137,               not set: the server passes its
//	  (workspace/conversations)             sdk/conversation/state.py L102-104             conversations_path (event_service.py L1083)
//	VS Code's server (/openhands/           agent_server/vscode_service.py L36-37          not set: the image's, read only
//	  .openvscode-server)
//
// TestEnvAndArgs fails if Env stops setting a variable of this table;
// integration.TestInnerBashEvents runs the terminal routes in a real
// container whose /workspace belongs to uid 10001.
