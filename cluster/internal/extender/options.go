package extender

import (
	"slices"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/vgpud/vgpud/cluster/internal/fit"
	"github.com/vgpud/vgpud/internal/configapi"
	"github.com/vgpud/vgpud/protocol"
	"github.com/vgpud/vgpud/protocol/podmodel"
)

// The flags of Options.
const (
	FlagNodePolicy              = "node-policy"
	FlagGPUPolicy               = "gpu-policy"
	FlagDefaultGPUMemPercentage = "default-gpumem-percentage"
	FlagDefaultGPUCores         = "default-gpucores"
	FlagBindUnansweredHold      = "bind-unanswered-hold"
	FlagBindWait                = "bind-wait"
)

// MaxBindWait bounds --bind-wait.
const MaxBindWait = 5 * time.Minute

// Options are the extender's settings: the scheduling defaults, which
// cluster-settings.yaml may change too, and the bind's waits.
type Options struct {
	NodePolicy string // podmodel.Binpack | podmodel.Spread
	GPUPolicy  string // a chain podmodel.ParseGPUPolicy reads, with a load key
	// DefaultGPUMemPercentage is the GPU memory share of a container that
	// names neither gpumem nor gpumem-percentage; 100 = the whole card.
	DefaultGPUMemPercentage int
	// DefaultGPUCores is the share of each GPU's cores, in percent, a
	// container that names no gpucores gets and is charged; 0 means a
	// slot's share of the GPU it lands on (its cores divided by its
	// split). HAMi leaves such a container unlimited and uncharged.
	DefaultGPUCores int
	// BindWait bounds how long a bind waits for the node's previous pod to
	// be allocated by kubelet before giving up (the scheduler retries).
	BindWait time.Duration
	// BindUnansweredHold is how long a Binding that got no answer may
	// still land, during which its pod's room stays held: kube-apiserver's
	// --request-timeout (1 minute by default), and a margin.
	BindUnansweredHold time.Duration
}

// DefaultOptions pack nodes, spread GPUs and give a container that asks
// for no memory the whole card.
func DefaultOptions() Options {
	return Options{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread, DefaultGPUMemPercentage: 100, BindWait: 10 * time.Second, BindUnansweredHold: 70 * time.Second}
}

// Defaults are the policies o puts in force.
func (o Options) Defaults() Defaults {
	return Defaults{NodePolicy: o.NodePolicy, GPUPolicy: o.GPUPolicy, Options: fit.Options{DefaultMemPercent: o.DefaultGPUMemPercentage, DefaultCores: o.DefaultGPUCores}}
}

// DeletedInFlight is how long a pod deleted while in flight keeps its
// node's in-flight slot: long enough for kubelet to finish admitting it,
// since the node role's GetPreferredAllocation and Allocate each wait up
// to --allocate-wait, which is at most --bind-wait in a sound setup.
func (o Options) DeletedInFlight() time.Duration { return 2 * o.BindWait }

// Flags are o's flags, bound to it.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagNodePolicy, Usage: "default node policy: " + podmodel.Binpack + " or " + podmodel.Spread, Value: o.NodePolicy, Destination: &o.NodePolicy},
		&cli.StringFlag{Name: FlagGPUPolicy, Usage: "default GPU policy: " + podmodel.Spread + " or " + podmodel.Binpack + ", optionally chained with " + podmodel.NUMA + " and " + podmodel.Topology + " in HAMi's syntax (" + podmodel.Binpack + "," + podmodel.Topology + ")", Value: o.GPUPolicy, Destination: &o.GPUPolicy},
		&cli.IntFlag{Name: FlagDefaultGPUMemPercentage, Usage: "GPU memory share given to a container that asks for neither gpumem nor gpumem-percentage (1.." + strconv.Itoa(protocol.MaxPercent) + ")", Value: o.DefaultGPUMemPercentage, Destination: &o.DefaultGPUMemPercentage},
		&cli.IntFlag{Name: FlagDefaultGPUCores, Usage: "share of each GPU's cores, in percent, given to and charged for a container that names no gpucores (1.." + strconv.Itoa(podmodel.MaxDefaultCores) + "); 0: a slot's share, the GPU's cores divided by its split, at most " + strconv.Itoa(podmodel.MaxDefaultCores), Value: o.DefaultGPUCores, Destination: &o.DefaultGPUCores},
		&cli.DurationFlag{Name: FlagBindUnansweredHold, Usage: "how long a Binding that got no answer may still land; its pod's room stays held until then (above kube-apiserver's --request-timeout)", Value: o.BindUnansweredHold, Destination: &o.BindUnansweredHold},
		&cli.DurationFlag{Name: FlagBindWait, Usage: "how long a bind waits for the node's previous pod to be allocated by kubelet (at most " + MaxBindWait.String() + ")", Value: o.BindWait, Destination: &o.BindWait},
	}
}

// FileSettings are what cluster-settings.yaml may set of o, bound to it.
func (o *Options) FileSettings() []configapi.Setting {
	return []configapi.Setting{
		configapi.Bind("nodePolicy", FlagNodePolicy, &o.NodePolicy).OneOf(podmodel.Binpack, podmodel.Spread),
		configapi.Bind("gpuPolicy", FlagGPUPolicy, &o.GPUPolicy).Pattern("^[a-z]+(,[a-z]+)*$"),
		configapi.Bind("defaultGPUMemPercentage", FlagDefaultGPUMemPercentage, &o.DefaultGPUMemPercentage).Range(1, protocol.MaxPercent),
		configapi.Bind("defaultGPUCores", FlagDefaultGPUCores, &o.DefaultGPUCores).Range(0, podmodel.MaxDefaultCores),
	}
}

// Validate reports what in o cannot work, by its flag.
func (o Options) Validate() field.ErrorList {
	var errs field.ErrorList
	add := func(flag string, v any, want string) {
		errs = append(errs, field.Invalid(field.NewPath(flag), v, want))
	}
	if !slices.Contains([]string{podmodel.Binpack, podmodel.Spread}, o.NodePolicy) {
		add(FlagNodePolicy, o.NodePolicy, "want "+podmodel.Binpack+" or "+podmodel.Spread)
	}
	if p, err := podmodel.ParseGPUPolicy(o.GPUPolicy); err != nil {
		add(FlagGPUPolicy, o.GPUPolicy, err.Error())
	} else if p.Mutex {
		add(FlagGPUPolicy, o.GPUPolicy, podmodel.Mutex+" as the default would hold every GPU alone, which is no sharing at all: name it in the pods that need it")
	} else if p.Load == "" {
		add(FlagGPUPolicy, o.GPUPolicy, "name "+podmodel.Spread+" or "+podmodel.Binpack+", optionally chained with "+podmodel.NUMA+" (e.g. "+podmodel.Binpack+","+podmodel.NUMA+")")
	}
	if o.BindWait <= 0 || o.BindWait > MaxBindWait {
		add(FlagBindWait, o.BindWait, "want a duration above 0 and at most "+MaxBindWait.String()+", e.g. 10s")
	}
	if o.BindUnansweredHold < time.Second {
		add(FlagBindUnansweredHold, o.BindUnansweredHold, "want at least 1s; above kube-apiserver's --request-timeout, 1m by default")
	}
	if o.DefaultGPUMemPercentage < 1 || o.DefaultGPUMemPercentage > protocol.MaxPercent {
		add(FlagDefaultGPUMemPercentage, o.DefaultGPUMemPercentage, "want 1.."+strconv.Itoa(protocol.MaxPercent))
	}
	if o.DefaultGPUCores < 0 || o.DefaultGPUCores > podmodel.MaxDefaultCores {
		add(FlagDefaultGPUCores, o.DefaultGPUCores, "want 0 (a slot's share) or 1.."+strconv.Itoa(podmodel.MaxDefaultCores)+"; a container holds a GPU whole only by asking gpucores 100")
	}
	return errs
}
