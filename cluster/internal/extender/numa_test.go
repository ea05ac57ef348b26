package extender

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

// HAMi's nvidia.com/numa-bind keeps a container's GPUs on one NUMA node.
func TestNUMABindAnnotation(t *testing.T) {
	d := Defaults{NodePolicy: podmodel.Binpack, GPUPolicy: podmodel.Spread}
	for value, want := range map[string]bool{"true": true, " True ": true, "false": false, "0": false} {
		req, _, err := requestFor(podWith(wellknown.AnnotationNUMABind, value), d)
		if err != nil || req.SingleNUMA != want {
			t.Errorf("%q: SingleNUMA %v, %v; want %v", value, req.SingleNUMA, err, want)
		}
	}
	if req, _, err := requestFor(podWith("other", "x"), d); err != nil || req.SingleNUMA {
		t.Errorf("no annotation: SingleNUMA %v, %v", req.SingleNUMA, err)
	}
	// A value that is no boolean is a typo, refused by name rather than
	// read as false.
	if _, _, err := requestFor(podWith(wellknown.AnnotationNUMABind, "yes"), d); err == nil || !strings.Contains(err.Error(), `nvidia.com/numa-bind="yes": want true or false`) {
		t.Errorf("yes: %v", err)
	}
}

// The annotation reaches the fit core through the leader's record of the
// pod and the filter: two GPUs on one NUMA node, or none.
func TestFilterHonoursNUMABind(t *testing.T) {
	var events []string
	h := placer(t, &events)
	split := gpuNode("split", 0, 0)
	split.GPUs[1].NUMA = 1
	sameNUMA := gpuNode("same", 0, 0)
	h.nodes = fakeNodes{"split": split, "same": sameNUMA}
	pod := strings.Replace(fmt.Sprintf(podJSON, `"nvidia.com/numa-bind":"true"`), `"nvidia.com/gpu":"1"`, `"nvidia.com/gpu":"2"`, 1)
	pod = strings.Replace(pod, `"uid":"uid-train"`, `"uid":"uid-numa"`, 1)
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(postTo(FilterHandler(h), `{"Pod":`+pod+`,"NodeNames":["split","same"]}`).Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "same" || !strings.Contains(res.FailedNodes["split"], "NUMA") {
		t.Errorf("fits %v, failed %v; want only the node whose GPUs share a NUMA node", res.NodeNames, res.FailedNodes)
	}
}

func podWith(key, value string) *slimpod.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.UID = "p", "ns", "uid-p"
	p.Annotations = map[string]string{key: value}
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}}
	return slimpod.Of(p, wellknown.DefaultResourceNames())
}
