package protocol

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// MaxCordonBytes bounds the annotation, as the policy does.
const MaxCordonBytes = 1024

// cordonEntry is what the policy accepts for one entry; keep the two
// equal (manifests' test compares them).
var cordonEntry = regexp.MustCompile(`^(GPU-[0-9A-Za-z-]{1,64}|[0-9]{1,3})$`)

// CordonEntryPattern is cordonEntry's source, for the policy's test.
func CordonEntryPattern() string { return cordonEntry.String() }

// Cordon is a parsed wellknown.AnnotationCordon: the GPUs it names.
type Cordon struct {
	UUIDs   []string
	Indices []int
}

// NodeCordon is the cordon a node's annotations hold: what
// wellknown.AnnotationCordon and wellknown.AnnotationCordonHAMi name, together.
func NodeCordon(annotations map[string]string) (Cordon, error) {
	var c Cordon
	for _, key := range []string{wellknown.AnnotationCordon, wellknown.AnnotationCordonHAMi} {
		one, err := parseCordon(key, annotations[key])
		if err != nil {
			return Cordon{}, err
		}
		c.UUIDs = append(c.UUIDs, one.UUIDs...)
		c.Indices = append(c.Indices, one.Indices...)
	}
	return c, nil
}

// ParseCordon parses an wellknown.AnnotationCordon value; "" names no GPU, and
// empty entries are skipped, as HAMi skips them.
func ParseCordon(raw string) (Cordon, error) { return parseCordon(wellknown.AnnotationCordon, raw) }

func parseCordon(key, raw string) (Cordon, error) {
	var c Cordon
	if len(raw) > MaxCordonBytes {
		return Cordon{}, fmt.Errorf("%s is %d bytes, over %d", key, len(raw), MaxCordonBytes)
	}
	for _, e := range strings.Split(raw, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !cordonEntry.MatchString(e) {
			return Cordon{}, fmt.Errorf("%s: %q is neither a GPU UUID (GPU-…) nor an index (0, 1, …); list them separated by commas", key, e)
		}
		if strings.HasPrefix(e, "GPU-") {
			c.UUIDs = append(c.UUIDs, e)
			continue
		}
		i, err := strconv.Atoi(e)
		if err != nil {
			return Cordon{}, fmt.Errorf("%s: index %q: %w", key, e, err)
		}
		c.Indices = append(c.Indices, i)
	}
	return c, nil
}

// Resolve says which of gpus c names, by position in gpus, and the
// entries that name none of them (a GPU since removed, a typo). gpus are
// a node's as the books hold them, and mig what their MIG instances are
// part of (Inventory.Bookable).
func (c Cordon) Resolve(gpus []GPU, mig map[string]*MIGRef) (cordoned []bool, unknown []string) {
	cordoned = make([]bool, len(gpus))
	for _, u := range c.UUIDs {
		found := false
		for i, g := range gpus {
			// A GPU in MIG mode, by the UUID nvidia-smi shows, is all
			// its instances.
			if strings.EqualFold(g.UUID, u) || (mig[g.UUID] != nil && strings.EqualFold(mig[g.UUID].GPU, u)) {
				cordoned[i], found = true, true
			}
		}
		if !found {
			unknown = append(unknown, u)
		}
	}
	for _, x := range c.Indices {
		found := false
		for i, g := range gpus {
			if g.Index == x {
				cordoned[i], found = true, true
			}
		}
		if !found {
			unknown = append(unknown, strconv.Itoa(x))
		}
	}
	return cordoned, unknown
}
