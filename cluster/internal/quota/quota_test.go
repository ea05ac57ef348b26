package quota

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vgpud/vgpud/cluster/internal/slimpod"
	"github.com/vgpud/vgpud/protocol/podmodel"
	"github.com/vgpud/vgpud/protocol/wellknown"
)

func gpuPod(name, ns string, gpus, mem, cores string, phase corev1.PodPhase) *corev1.Pod {
	l := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), "nvidia.com/gpumem": resource.MustParse(mem)}
	if cores != "" {
		l["nvidia.com/gpucores"] = resource.MustParse(cores)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: l}}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func rq(name, ns string, hard map[string]string) *corev1.ResourceQuota {
	h := corev1.ResourceList{}
	for k, v := range hard {
		h[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: h}}
}

func TestCompute(t *testing.T) {
	names := wellknown.DefaultResourceNames()
	var live []*slimpod.Pod
	for _, p := range []*corev1.Pod{
		gpuPod("a", "ai", "2", "10000", "20", corev1.PodRunning), // 20000 MiB, 40 cores
		gpuPod("b", "ai", "1", "8000", "", corev1.PodPending),    // 8000 MiB
		gpuPod("done", "ai", "1", "30000", "", corev1.PodSucceeded),
		gpuPod("bad", "ai", "1", "0.5", "", corev1.PodRunning), // unreadable: counts as nothing
		{ObjectMeta: metav1.ObjectMeta{Name: "cpu", Namespace: "ai"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}},
	} {
		live = append(live, slimpod.Of(p, names))
	}
	quotas := []*corev1.ResourceQuota{
		rq("q1", "ai", map[string]string{"requests.nvidia.com/gpumem": "40000"}),
		rq("q2", "ai", map[string]string{"nvidia.com/gpumem": "50000", "limits.nvidia.com/gpucores": "100"}),
	}
	got := Compute(live, quotas, names)
	want := podmodel.Quota{
		Memory: podmodel.Limit{Set: true, Hard: 40000, Used: 28000},
		Cores:  podmodel.Limit{Set: true, Hard: 100, Used: 40},
	}
	if got != want {
		t.Fatalf("got %+v want %+v", got, want)
	}
	if got := Compute(live, nil, names); got != (podmodel.Quota{}) {
		t.Errorf("no quota must mean no limits, got %+v", got)
	}
}

func TestSourceReadsInformers(t *testing.T) {
	kube := fake.NewClientset(
		gpuPod("a", "ai", "1", "38000", "", corev1.PodRunning),
		gpuPod("other", "ml", "1", "99999", "", corev1.PodRunning),
		rq("q", "ai", map[string]string{"requests.nvidia.com/gpumem": "40000"}),
	)
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(slimpod.Transform(wellknown.DefaultResourceNames())))
	src := New(factory.Core().V1().Pods().Informer(), factory.Core().V1().ResourceQuotas().Informer(), wellknown.DefaultResourceNames())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	got := src.NamespaceQuota("ai")
	if !got.Memory.Set || got.Memory.Hard != 40000 || got.Memory.Used != 38000 || got.Cores.Set {
		t.Fatalf("ai: %+v", got)
	}
	if got := src.NamespaceQuota("ml"); got.Memory.Set {
		t.Fatalf("ml has no quota: %+v", got)
	}
}
