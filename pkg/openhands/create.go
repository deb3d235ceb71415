package openhands

import (
	"bytes"
	"encoding/json"
	"strings"
)

// WorktreeGuidance is the text the agent server adds to the agent's
// system message when it gives a conversation its own worktree
// (conversation_service.py L88-L104 @v1.43.1, _build_worktree_guidance):
// ohd makes the worktree on the host instead, so it adds the same text.
// source is the workspace asked for, root the worktree, workspace the
// working directory inside it, branch "openhands/<id>".
func WorktreeGuidance(source, root, workspace, branch string) string {
	return "This conversation uses a dedicated git worktree.\n" +
		"- Original workspace: " + source + "\n" +
		"- Worktree root: " + root + "\n" +
		"- Active workspace: " + workspace + "\n" +
		"- Branch: " + branch + "\n" +
		"Do all file and git work inside this worktree. Do your work on a new, " +
		"appropriately-named branch, based off the main/master branch, " +
		"and do not switch back to the original workspace."
}

// PlainFolderGuidance is what ohd adds to the agent's system message for
// a conversation in a folder that is not a git repository (ohd's
// addition; the agent server has no such text): the agent works on the
// user's files directly, without a repository of its own, and a git
// repository it tried to make there would not be ohd's to publish or
// keep (the nested repositories of a plain folder are read-only to it).
func PlainFolderGuidance(workingDir string) string {
	return "The working directory " + workingDir + " is not a git repository, and this conversation has no git repository: " +
		"git is not available for your work here (do not run git init or commit; any repositories inside the folder are read-only to you). " +
		"Your changes are written directly to the user's files, which is how they are kept."
}

// AppendSystemMessageSuffix appends addition to the agent's
// agent_context.system_message_suffix in a create body's fields, as the
// agent server's _append_system_message_suffix does
// (conversation_service.py L120-L126): after the existing suffix
// (trimmed) and a blank line, or alone. The agent is "agent" (the SDK's
// body) or "agent_settings" (Agent Canvas's, ref §2a); a body with
// neither, or one whose agent is not a JSON object, is left as it is, and
// false is returned.
func AppendSystemMessageSuffix(fields map[string]json.RawMessage, addition string) bool {
	for _, name := range []string{"agent", "agent_settings"} {
		raw, ok := fields[name]
		if !ok {
			continue
		}
		var agent map[string]json.RawMessage
		if json.Unmarshal(raw, &agent) != nil || agent == nil {
			return false
		}
		ctx := map[string]json.RawMessage{}
		if c, ok := agent["agent_context"]; ok && string(bytes.TrimSpace(c)) != "null" {
			if json.Unmarshal(c, &ctx) != nil || ctx == nil {
				return false
			}
		}
		var existing string
		if s, ok := ctx["system_message_suffix"]; ok && string(bytes.TrimSpace(s)) != "null" {
			if json.Unmarshal(s, &existing) != nil {
				return false
			}
		}
		suffix := addition
		if e := strings.TrimSpace(existing); e != "" {
			suffix = e + "\n\n" + addition
		}
		ctx["system_message_suffix"] = marshalString(suffix)
		agent["agent_context"] = marshalObject(ctx)
		fields[name] = marshalObject(agent)
		return true
	}
	return false
}

func marshalString(s string) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSpace(buf.Bytes())
}

func marshalObject(m map[string]json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(m)
	return bytes.TrimSpace(buf.Bytes())
}
