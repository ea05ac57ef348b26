package protocol

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Version is the wire format's major version, which this build reads and
// writes. It changes only when an older reader would misread what a newer
// writer means; vgpud releases within one major version run side by side
// during a rolling upgrade.
//
// Within a version, the format grows by fields. A reader ignores a field
// it does not know when leaving it out changes nothing the reader decides
// (a GPU's topology, say, for a leader that does not score by it). Where
// ignoring it would be wrong (the GPU is split into MIG instances, and a
// reader that books it whole would double-book it), the writer also names
// the feature in the value's requires list, and a reader that does not
// understand every feature listed refuses the value, saying which and
// what to do.
const Version = 1

// FeatureMutex: some slice of an assignment holds its GPU alone
// (GPUSlice.Exclusive); a reader that ignored it would book the GPU as
// shared.
const FeatureMutex = "mutex"

// FeatureMIG: some slice of an assignment is a MIG instance
// (GPUSlice.MIG); a node that ignored it would hand the container a
// slice of a GPU it cannot share.
const FeatureMIG = "mig"

// UnderstoodFeatures are the features this build honours in a requires
// list; the node role lists them in its inventory (Inventory.Features).
func UnderstoodFeatures() []string { return []string{FeatureMutex, FeatureMIG, FeatureMIGOnDemand} }

// maxFeatures bounds an inventory's features list.
const maxFeatures = 64

// ErrUnsupported is in the error of a value a newer vgpud wrote that this
// one cannot honour: its reader must not treat it as absent (errors.Is).
var ErrUnsupported = errors.New("written by a newer vgpud")

// checkVersion refuses a value this build cannot honour: another major
// version, or a feature it does not understand. An empty requires list
// is no requirement.
func checkVersion(version int, requires []string) error {
	switch {
	case version > Version:
		return fmt.Errorf("wire version %d is newer than this vgpud reads (%d): %w of a newer major release; upgrade this replica, or roll that one back", version, Version, ErrUnsupported)
	case version != Version:
		return fmt.Errorf("version %d is not supported (want %d)", version, Version)
	}
	var unknown []string
	for _, f := range requires {
		if !slices.Contains(UnderstoodFeatures(), f) {
			unknown = append(unknown, f)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("requires %s, which this vgpud does not understand: %w; upgrade this replica before using the feature", strings.Join(unknown, ", "), ErrUnsupported)
	}
	return nil
}
