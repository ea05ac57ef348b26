package podmodel

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/protocol/wellknown"
)

// The names a GPU policy chain is made of (HAMi's, for
// hami.io/gpu-scheduler-policy). Binpack and Spread are also the node
// policies.
const (
	Binpack = "binpack"
	Spread  = "spread"
	// NUMA orders a container's GPUs by NUMA node: first in the chain,
	// it keeps them on one node where one has enough; after a load key,
	// it only breaks that key's ties. It never refuses (numa-bind does).
	NUMA = "numa"
	// Mutex filters: each GPU a container takes must be idle, and nobody
	// else joins it while the pod holds it; the slice stays what the
	// container asks. The pod's own containers may share it.
	Mutex = "mutex"
	// Topology sorts a container that asks for several GPUs onto the
	// closest set the node has enough of: joined by NVLink, else behind
	// one PCIe switch, else on one NUMA node. It never refuses, and it
	// comes before the load key wherever it stands (HAMi's reads so).
	Topology = "topology-aware"
)

// MaxPolicyBytes bounds a policy chain: the longest sensible one is
// some 40 bytes, and every filter parses it.
const MaxPolicyBytes = 256

// NUMAOrder is where numa stands in a GPU policy chain.
type NUMAOrder int

const (
	NUMAUnordered NUMAOrder = iota // not named
	NUMAFirst                      // before the load key: one NUMA node where one has enough
	NUMATiebreak                   // after it: ties in load go to the first pick's NUMA node
)

// GPUPolicy is how a container's GPUs are chosen among those that fit:
// a chain of names, applied in the order written. Load (binpack or
// spread) and numa sort; mutex filters wherever it stands.
type GPUPolicy struct {
	Load     string // Binpack or Spread; "" takes the cluster default's
	NUMA     NUMAOrder
	Mutex    bool
	Topology bool
}

// ParseGPUPolicy reads a chain such as "binpack,numa": names separated
// by commas, case and spaces ignored, empty entries skipped. A name it
// does not know, binpack with spread, or a name given twice is refused
// with what to write instead, where HAMi ignores it silently.
func ParseGPUPolicy(chain string) (GPUPolicy, error) {
	if len(chain) > MaxPolicyBytes {
		return GPUPolicy{}, fmt.Errorf("longer than %d bytes; a chain names each of binpack or spread, numa, mutex and topology-aware at most once", MaxPolicyBytes)
	}
	var p GPUPolicy
	seen := map[string]bool{}
	for _, name := range strings.Split(chain, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		if seen[name] {
			return GPUPolicy{}, fmt.Errorf("%q is named twice", name)
		}
		seen[name] = true
		switch name {
		case Binpack, Spread:
			if p.Load != "" {
				return GPUPolicy{}, fmt.Errorf("%s and %s contradict: name one", p.Load, name)
			}
			p.Load = name
		case NUMA:
			p.NUMA = NUMAFirst
			if p.Load != "" {
				p.NUMA = NUMATiebreak
			}
		case Mutex:
			p.Mutex = true
		case Topology:
			p.Topology = true
		default:
			return GPUPolicy{}, fmt.Errorf("unknown policy %q: want a comma-separated chain of %s or %s, and %s, %s or %s", name, Binpack, Spread, NUMA, Mutex, Topology)
		}
	}
	return p, nil
}

// Or is p with def's load key where p names none: a pod that names only
// numa still packs as the cluster does.
func (p GPUPolicy) Or(def GPUPolicy) GPUPolicy {
	if p.Load == "" {
		p.Load = def.Load
	}
	return p
}

// String is p as a chain ParseGPUPolicy reads back.
func (p GPUPolicy) String() string {
	load := p.Load
	if load == "" {
		load = Spread
	}
	chain := load
	switch p.NUMA {
	case NUMAFirst:
		chain = NUMA + "," + load
	case NUMATiebreak:
		chain = load + "," + NUMA
	}
	if p.Topology {
		chain = Topology + "," + chain
	}
	if p.Mutex {
		chain = Mutex + "," + chain
	}
	return chain
}

// GPUPolicyOf reads a pod's GPU policy chain from vgpud's annotation,
// else HAMi's, else def's; a chain without a load key takes def's. Where
// both annotations are set vgpud's wins and HAMi's is not read, as
// before chains (a pod HAMi and vgpud both schedule may carry values
// only HAMi knows); the webhook warns that it is ignored (Shadowed).
func GPUPolicyOf(a map[string]string, def string) (GPUPolicy, error) {
	d, err := ParseGPUPolicy(def)
	if err != nil {
		return GPUPolicy{}, fmt.Errorf("the cluster's default GPU policy %q: %w", def, err)
	}
	for _, k := range []string{wellknown.AnnotationGPUPolicy, wellknown.AnnotationGPUPolicyHAMi} {
		v, ok := a[k]
		if !ok {
			continue
		}
		p, err := ParseGPUPolicy(v)
		if err != nil {
			return GPUPolicy{}, fmt.Errorf("annotation %s=%.64q: %w", k, v, err)
		}
		return p.Or(d), nil
	}
	return d, nil
}

// Shadowed says, for each policy that both vgpud's and HAMi's annotation
// set to different values, that HAMi's is ignored: a warning for the
// pod's author, who may have meant HAMi's.
func Shadowed(a map[string]string) []string {
	var out []string
	for _, pair := range [][2]string{{wellknown.AnnotationGPUPolicy, wellknown.AnnotationGPUPolicyHAMi}, {wellknown.AnnotationNodePolicy, wellknown.AnnotationNodePolicyHAMi}} {
		ours, ok1 := a[pair[0]]
		hami, ok2 := a[pair[1]]
		if ok1 && ok2 && !strings.EqualFold(strings.TrimSpace(ours), strings.TrimSpace(hami)) {
			out = append(out, fmt.Sprintf("annotation %s=%.64q is ignored: %s=%.64q wins; remove one", pair[1], hami, pair[0], ours))
		}
	}
	return out
}
