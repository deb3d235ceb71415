// Package store keeps ohd's state in one bbolt file, <state-dir>/ohd.db:
// conversation records, their inner session keys, the operator's secrets and
// credential configuration, and the audit log.
//
// # Buckets
//
//	meta/
//	    schema_version      decimal schema version (see SchemaVersion)
//	    server_id           random id of this ohd installation; containers carry it as dev.ohd.server
//	    key_check           a known value sealed with the master key: a wrong key is refused before anything is written
//	conversations/
//	    <id>                JSON Conversation (no secret values; git grants' push patterns and route in grants.git_options)
//	conversation_keys/
//	    <id>                inner session key, sealed ("conversation_keys|<id>")
//	conversation_secret_keys/
//	    <id>                the inner server's cipher key (OH_SECRET_KEY), sealed ("conversation_secret_keys|<id>"); never rotated
//	secrets/
//	    <name>              JSON secretRecord: value sealed ("secrets|<name>"), timestamps
//	git_credentials/
//	    <host>              JSON GitCredential: username, the name of the secret holding the password, scheme and auth (relay)
//	llm_profiles/
//	    <name>              JSON LLMProfile: model, base URL, the name of the secret holding the API key
//	mcp_servers/
//	    <name>              JSON MCPServer: the server's URL, and per credential header the name of the secret holding its value
//	oauth_servers/
//	    <name>              JSON oauthRecord: token URL, client id, tokens sealed ("oauth_servers|<name>|access", "...|refresh")
//	git_branches/
//	    <host>/<repo> <ref> JSON {"conversation","created_at"}: the conversation that created branch ref of
//	                        repository repo (the path as the git relay was asked for it) through the relay,
//	                        recorded when the host reported the ref updated; its push policy lets that
//	                        conversation update the branch (broker: pushpolicy.go). Removed with the conversation.
//	audit/
//	    <seq>               JSON AuditRecord; seq is a big-endian uint64 (bbolt NextSequence), oldest first
//
// # Secrets at rest
//
// Every secret value is sealed with AES-256-GCM under the master key (package
// masterkey), with additional data naming its bucket and key, so no value is
// ever in the file in clear and a sealed value moved to another key does not
// open. Records hold names of secrets, never values.
//
// # Schema versions and migrations
//
// meta/schema_version holds the version the file was written with. Open runs
// every migration from that version up to SchemaVersion in one transaction; a
// file written by a newer ohd is refused rather than guessed at.
//
//	1 -> 2  conversations with a worktree get git_layout "shared": they
//	        were made before git views (see Conversation.GitLayout)
//	2 -> 3  live conversations with a container get inner_in_container:
//	        their inner server's state is in the container's writable
//	        layer (see Conversation.InnerInContainer)
//
// A bucket added without a change to what existing records mean
// (git_branches) is created by Open and needs no migration: a file
// without it had no branch created through the relay recorded, which
// is what an empty bucket says.
//
// # Crash consistency
//
// Each change is one bbolt transaction: a crash leaves the file at the last
// committed state. The orchestrator writes a conversation record in state
// provisioning before any side effect, and records each step's result as it
// completes, so reconcile after a crash knows what to undo or finish.
//
// Audit records are written in batches by a background writer (AuditAsync)
// so that the broker's hot path never waits for fsync; a crash can lose the
// records of the last flush interval (100 ms), never corrupt the log.
//
// # Caveats
//
// The store is used by one ohd process: bbolt locks the file, and the daemon
// also holds a lock file in the state directory. Reads of conversations are
// served from an in-memory copy kept in step with every committed write.
package store
