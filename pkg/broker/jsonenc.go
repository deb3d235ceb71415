package broker

import (
	"strconv"
	"unicode/utf8"
)

// The hot answers (whoami, errors) are encoded by hand: encoding/json's
// reflection costs more than the rest of the request's own work. The
// output is what encoding/json would produce (HTML-safe escaping
// included); tests compare the two.

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaping as
// encoding/json does (HTML characters and U+2028/U+2029 included; invalid
// UTF-8 becomes U+FFFD).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendJSONList(dst []byte, list []string) []byte {
	dst = append(dst, '[')
	for i, s := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

// appendWhoami encodes whoamiBody.
func appendWhoami(dst []byte, id string, conv *Conversation) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"epoch":`...)
	dst = strconv.AppendUint(dst, conv.Epoch, 10)
	dst = append(dst, `,"uid":`...)
	dst = strconv.AppendInt(dst, int64(conv.UID), 10)
	dst = append(dst, `,"gid":`...)
	dst = strconv.AppendInt(dst, int64(conv.GID), 10)
	dst = append(dst, `,"grants":{"secrets":`...)
	dst = appendJSONList(dst, conv.Grants.Secrets)
	dst = append(dst, `,"git":`...)
	dst = appendJSONList(dst, conv.Grants.Git)
	dst = append(dst, `,"llm":`...)
	dst = appendJSONList(dst, conv.Grants.LLM)
	dst = append(dst, `,"oauth":`...)
	dst = appendJSONList(dst, conv.Grants.OAuth)
	dst = append(dst, `,"mcp":`...)
	dst = appendJSONList(dst, conv.Grants.MCP)
	dst = append(dst, `,"net":`...)
	dst = appendJSONList(dst, conv.Grants.Net)
	return append(dst, "}}\n"...)
}

// appendError encodes errorBody.
func appendError(dst []byte, msg, code string) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendJSONString(dst, msg)
	dst = append(dst, `,"code":`...)
	dst = appendJSONString(dst, code)
	return append(dst, "}\n"...)
}
