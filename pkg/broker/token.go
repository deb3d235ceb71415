package broker

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

const (
	tokenPrefix = "ohd1."
	macLabel    = "ohd-broker-v1|"
	// macLen is the length of the base64url (no padding) text of a
	// HMAC-SHA256.
	macLen = 43
	// maxIDLen bounds a conversation id (a UUID is 36).
	maxIDLen = 128
	// KeySize is the size of a broker key.
	KeySize = 32
	// keyInfo is the HKDF info string DeriveKey uses.
	keyInfo = "ohd broker key v1"
)

var macEncoding = base64.RawURLEncoding.Strict()

// DeriveKey derives the broker key from ohd's master key:
// HKDF-SHA256 (RFC 5869) with an empty salt, info "ohd broker key v1" and a
// 32-byte output. The derivation is fixed: changing it invalidates every
// token file.
func DeriveKey(masterKey []byte) []byte {
	k, err := hkdf.Key(sha256.New, masterKey, nil, keyInfo, KeySize)
	if err != nil {
		// Only possible for an output longer than 255 hash blocks.
		panic("broker: derive key: " + err.Error())
	}
	return k
}

// Token returns the bearer token of conversation id at epoch:
//
//	ohd1.<id>.<epoch>.<mac>
//
// epoch in decimal and mac the base64url text, without padding, of
// HMAC-SHA256(key, "ohd-broker-v1|<id>|<epoch>").
func Token(key []byte, id string, epoch uint64) string {
	e := strconv.FormatUint(epoch, 10)
	return tokenPrefix + id + "." + e + "." + computeMAC(key, id, e)
}

func computeMAC(key []byte, id, epoch string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macLabel))
	m.Write([]byte(id))
	m.Write([]byte{'|'})
	m.Write([]byte(epoch))
	return macEncoding.EncodeToString(m.Sum(nil))
}

// ParseToken splits a token into its conversation id, epoch and MAC. It
// checks the form only (ErrInvalidToken), not the MAC.
func ParseToken(s string) (id string, epoch uint64, mac []byte, err error) {
	id, epoch, m, ok := parseToken(s)
	if !ok {
		return "", 0, nil, fmt.Errorf("parse token: %w", ErrInvalidToken)
	}
	mac, err = macEncoding.DecodeString(m)
	if err != nil || len(mac) != sha256.Size {
		return "", 0, nil, fmt.Errorf("parse token: %w", ErrInvalidToken)
	}
	return id, epoch, mac, nil
}

// parseToken is ParseToken without allocations: it returns the MAC as its
// base64url text, which the broker compares with the expected text (the
// strict encoding makes text and bytes equivalent).
func parseToken(s string) (id string, epoch uint64, mac string, ok bool) {
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok || len(rest) < 1+1+1+1+macLen {
		return "", 0, "", false
	}
	mac = rest[len(rest)-macLen:]
	rest = rest[:len(rest)-macLen]
	if rest[len(rest)-1] != '.' {
		return "", 0, "", false
	}
	rest = rest[:len(rest)-1]
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return "", 0, "", false
	}
	id, e := rest[:dot], rest[dot+1:]
	if !ValidID(id) || !validEpoch(e) || !validMACText(mac) {
		return "", 0, "", false
	}
	epoch, err := strconv.ParseUint(e, 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	return id, epoch, mac, true
}

// ValidID reports whether id can name a conversation: 1-128 characters of
// [A-Za-z0-9_-], the first a letter or digit. Ids are path components and
// token fields, so nothing else is accepted.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// validEpoch accepts canonical decimal: no sign, no leading zero.
func validEpoch(e string) bool {
	if len(e) == 0 || len(e) > 20 || (len(e) > 1 && e[0] == '0') {
		return false
	}
	for i := 0; i < len(e); i++ {
		if e[i] < '0' || e[i] > '9' {
			return false
		}
	}
	return true
}

func validMACText(m string) bool {
	if len(m) != macLen {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	// 32 bytes are 256 bits; the last of 43 characters carries 4 of them,
	// so its low 2 bits must be zero (canonical, as the strict decoder
	// demands).
	return strings.IndexByte(base64Alphabet, m[macLen-1])&3 == 0
}

const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
