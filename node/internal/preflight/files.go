package preflight

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// maxFileBytes bounds each configuration file read: a runtime's are a few
// KiB, and a FIFO or a device in their place must not block or fill the
// node role.
const maxFileBytes = 1 << 20

// regular says why path cannot be read as a configuration file, or nil:
// it must be a regular file (symlinks followed, as the runtimes do) no
// larger than maxFileBytes.
func regular(path string) (fs.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than a runtime configuration (%d)", path, fi.Size(), maxFileBytes)
	}
	return fi, nil
}

// readBounded reads a regular file of at most maxFileBytes.
func readBounded(path string) ([]byte, fs.FileInfo, error) {
	fi, err := regular(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxFileBytes {
		return nil, nil, fmt.Errorf("%s grew past %d bytes", path, maxFileBytes)
	}
	return b, fi, nil
}

// containerdFiles walks containerd's imports as containerd does (each
// relative to the file that names it, globs expanded, each file once)
// and checks every file is readable and bounded before containerd's
// loader opens it. A glob whose directory this process cannot see is an
// error, not "no files": a drop-in there could turn NRI off unseen.
func containerdFiles(main string) (files []string, newest time.Time, err error) {
	seen := map[string]bool{}
	pending := []string{main}
	for len(pending) > 0 {
		p := pending[0]
		pending = pending[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		raw, fi, err := readBounded(p)
		if err != nil {
			return nil, time.Time{}, err
		}
		if fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		files = append(files, p)
		var top struct {
			Imports []string `toml:"imports"`
		}
		if err := toml.Unmarshal(raw, &top); err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: %w", p, err)
		}
		for _, imp := range top.Imports {
			imp = filepath.Clean(imp)
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(filepath.Dir(p), imp)
			}
			if !strings.Contains(imp, "*") {
				pending = append(pending, imp)
				continue
			}
			dir := filepath.Dir(imp)
			if _, err := os.Stat(dir); err != nil {
				return nil, time.Time{}, fmt.Errorf("%s imports %s, whose directory this process cannot see: %w", p, imp, unseen{err})
			}
			m, err := filepath.Glob(imp)
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("%s imports %s: %w", p, imp, err)
			}
			pending = append(pending, m...)
		}
	}
	return files, newest, nil
}

// unseen is an imported directory this process cannot see, whatever the
// reason stat gave.
type unseen struct{ err error }

func (u unseen) Error() string { return u.err.Error() }
func (u unseen) Unwrap() error { return u.err }

// notFound says whether err means a file or directory is not there (not
// mounted, most often).
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.As(err, new(unseen))
}
