package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxAnnotation bounds what we try to parse; the apiserver caps all of an
// object's annotations at 256 KiB together.
const maxAnnotation = 256 << 10

// decode parses one JSON value into v. A field it does not know is
// ignored: a newer vgpud may have added it during a rolling upgrade (a
// field an older replica must not ignore is named in the value's
// requires list, checkVersion). Trailing data is refused, so a truncated
// or doubled write is an error rather than a silently zero field.
func decode(s string, v any) error {
	if s == "" {
		return errors.New("value is empty")
	}
	if len(s) > maxAnnotation {
		return fmt.Errorf("value is %d bytes, over the %d-byte limit", len(s), maxAnnotation)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON: trailing data after the object")
	}
	return nil
}

func marshal(v any, what string) (string, error) {
	b, err := json.Marshal(v)
	if err == nil {
		b, err = withNewerFields(b)
	}
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", what, err)
	}
	return string(b), nil
}
