//go:build !skewnext

package protocol

// withNewerFields is the identity in every build but the end-to-end
// suite's stand-in for a newer release (newer_skewnext.go).
func withNewerFields(b []byte) ([]byte, error) { return b, nil }
