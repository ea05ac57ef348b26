package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"
)

// crioDropIn is what fixes a CRI-O node (docs/install.md).
const crioDropIn = "vgpud's CRI-O drop-in (manifests/node-setup/crio-vgpud.conf, CRI-O 1.34 or newer) and restart CRI-O"

// crioFile is the part of one CRI-O configuration file that decides
// whether it fails closed. Pointers tell a key left out (the earlier
// file's value stands) from one set.
type crioFile struct {
	Crio struct {
		NRI struct {
			Enable    *bool   `toml:"enable_nri"`
			Listen    *string `toml:"nri_listen"`
			Validator struct {
				Enable   *bool     `toml:"nri_enable_default_validator"`
				Required *[]string `toml:"nri_validator_required_plugins"`
				Tolerate *string   `toml:"nri_validator_tolerate_missing_plugins_annotation"`
			} `toml:"default_validator"`
		} `toml:"nri"`
		Runtime struct {
			CDISpecDirs *[]string `toml:"cdi_spec_dirs"`
		} `toml:"runtime"`
	} `toml:"crio"`
}

// CRIO reads CRI-O's configuration as CRI-O merges it: the main file at
// path, then every file under the crio.conf.d directory beside it in
// lexical order, each key from the last file that sets it (a list
// replaced whole). CRI-O's defaults since 1.30: NRI on at NRI's default
// socket, its validator off.
func CRIO(path string, w Want) Verdict {
	v := Verdict{Runtime: "cri-o", Config: path}
	s := nri{Enabled: true}
	// CRI-O always injects CDI devices.
	cdiDirs := defaultCDISpecDirs()
	dir := filepath.Join(filepath.Dir(path), "crio.conf.d")
	files, err := crioFiles(path, dir)
	if err != nil {
		return unreadable(v, err)
	}
	for _, f := range files {
		raw, fi, err := readBounded(f)
		if err != nil {
			return unreadable(v, err)
		}
		if fi.ModTime().After(v.newest) {
			v.newest = fi.ModTime()
		}
		var c crioFile
		if err := toml.Unmarshal(raw, &c); err != nil {
			return unreadable(v, fmt.Errorf("%s: %w", f, err))
		}
		n := c.Crio.NRI
		set(&s.Enabled, n.Enable)
		set(&s.Socket, n.Listen)
		set(&s.Validator, n.Validator.Enable)
		set(&s.Required, n.Validator.Required)
		set(&s.Tolerate, n.Validator.Tolerate)
		set(&cdiDirs, c.Crio.Runtime.CDISpecDirs)
	}
	v.CDI = CDI{Enabled: len(cdiDirs) > 0, SpecDirs: cdiDirs}
	v.Files = files
	v.Result, v.Scope, v.Problems = judge(s, w, crioDropIn)
	return v
}

// crioFiles lists the main file, where present, and then the drop-ins.
func crioFiles(main, dir string) ([]string, error) {
	var files []string
	if _, err := os.Stat(main); err == nil {
		files = append(files, main)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipDir
			}
			return err
		}
		// CRI-O reads every entry but directories, symlinks followed:
		// readBounded refuses what is not, in the end, a regular file.
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("neither %s nor %s exists", main, dir)
	}
	return files, nil
}

// set overwrites *to with *from where the file set it.
func set[T any](to *T, from *T) {
	if from != nil {
		*to = *from
	}
}
