package hardgit

// IsObjectID reports whether s is a full object id as git prints it: 40
// (SHA-1) or 64 (SHA-256) lower-case hex digits.
func IsObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
