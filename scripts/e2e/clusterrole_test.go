//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/protocol/wellknown"
	"github.com/vgpud/vgpud/scripts/harness"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vgpud/vgpud/manifests"
	"github.com/vgpud/vgpud/protocol"
)

// webhookHost resolves to 127.0.0.1 (scripts/e2e.sh adds it to /etc/hosts)
// and is one of the DNS names on vgpud's serving certificate, so the
// apiserver verifies TLS exactly as it does through the Service.
const webhookHost = "vgpud.vgpud-system.svc"
const (
	listen    = "127.0.0.1:9443" // webhook and probes
	extListen = "127.0.0.1:9444" // extender, mutual TLS
)

func (e env) applyWebhookConfig(t *testing.T) {
	t.Helper()
	mwc, err := manifests.WebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	// The policy that makes GPU pods placeable before the webhook runs.
	policy, binding, err := manifests.GPUPodsPolicy()
	if err != nil {
		t.Fatal(err)
	}
	adm := e.kube.AdmissionregistrationV1()
	_ = adm.MutatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	_ = adm.MutatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	if _, err := adm.MutatingAdmissionPolicies().Create(context.Background(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No Service routing without kube-proxy: the same host name by URL.
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.Service = nil
		mwc.Webhooks[i].ClientConfig.URL = ptr.To("https://" + webhookHost + ":9443/webhook")
	}
	ctx := context.Background()
	_ = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{})
	if _, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func gpuPod(name string, limits map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	l := corev1.ResourceList{}
	for k, v := range limits {
		l[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "work", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: l},
		}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func (e env) readyz(caPEM []byte) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: webhookHost}}}
	resp, err := c.Get("https://" + listen + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("readyz %d", resp.StatusCode)
	}
	return nil
}

func TestClusterRole(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.applyWebhookConfig(t)
	a := e.start(t, "vgpud-a", listen)

	var caPEM []byte
	t.Run("leader labelled, Secret made, caBundle set, ready", func(t *testing.T) {
		harness.Eventually(t, 20*time.Second, "one leader label on vgpud-a", func() error {
			if l := e.leaders(t); len(l) != 1 || l[0] != "vgpud-a" {
				return fmt.Errorf("leaders %v", l)
			}
			return nil
		})
		harness.Eventually(t, 20*time.Second, "caBundle equals the Secret's ca.crt", func() error {
			s, err := e.kube.CoreV1().Secrets(ns).Get(ctx, "vgpud-tls", metav1.GetOptions{})
			if err != nil {
				return err
			}
			m, err := e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "vgpud", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(s.Data["ca.crt"]) == 0 || string(m.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) {
				return fmt.Errorf("caBundle not the Secret's CA yet")
			}
			caPEM = s.Data["ca.crt"]
			return nil
		})
		harness.Eventually(t, 20*time.Second, "/readyz over TLS", func() error { return e.readyz(caPEM) })
	})

	harness.EnsureNamespace(t, e.kube, "team-a", nil)
	pods := e.kube.CoreV1().Pods("team-a")

	t.Run("GPU pod mutated by the apiserver's call", func(t *testing.T) {
		p, err := pods.Create(ctx, gpuPod("mem-only", map[string]string{"nvidia.com/gpumem": "3000"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.SchedulerName != "vgpud-scheduler" {
			t.Errorf("schedulerName %q", p.Spec.SchedulerName)
		}
		got := p.Spec.Containers[0].Resources
		if q := got.Limits["nvidia.com/gpu"]; q.Value() != 1 {
			t.Errorf("nvidia.com/gpu limit %v, want 1 added", q.String())
		}
		if q := got.Requests["nvidia.com/gpumem"]; q.Value() != 3000 {
			t.Errorf("gpumem request %v, want limits copied to requests", q.String())
		}
		plain, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if plain.Spec.SchedulerName != "default-scheduler" {
			t.Errorf("a pod without GPU resources was touched: schedulerName %q", plain.Spec.SchedulerName)
		}
	})

	t.Run("denials reach the user with our message", func(t *testing.T) {
		for _, tc := range []struct {
			pod  *corev1.Pod
			want []string
		}{
			{gpuPod("priv", map[string]string{"nvidia.com/gpu": "1"}, func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}), []string{"pods.vgpud.io", "privileged", "drop securityContext.privileged"}},
			{gpuPod("pinned", map[string]string{"nvidia.com/gpu": "1"}, func(p *corev1.Pod) { p.Spec.NodeName = "n1" }), []string{"nodeName"}},
			{gpuPod("pct", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}), []string{"gpumem-percentage", "1..100"}},
		} {
			_, err := pods.Create(ctx, tc.pod, metav1.CreateOptions{})
			if err == nil {
				t.Errorf("%s admitted", tc.pod.Name)
				continue
			}
			if err := harness.Contains(err.Error(), tc.want...); err != nil {
				t.Errorf("%s: %v", tc.pod.Name, err)
			}
		}
		harness.EnsureNamespace(t, e.kube, "ai-team", nil)
		_, err := e.kube.CoreV1().ResourceQuotas("ai-team").Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.nvidia.com/gpumem": resource.MustParse("40000")}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// 2 GPUs × 19000 MiB: native quota sees 19000, vgpud counts 38000.
		if _, err := e.kube.CoreV1().Pods("ai-team").Create(ctx, gpuPod("big", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "19000"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 10*time.Second, "quota denial", func() error {
			_, err := e.kube.CoreV1().Pods("ai-team").Create(ctx, gpuPod("over", map[string]string{"nvidia.com/gpumem": "4000"}), metav1.CreateOptions{})
			if err == nil {
				// The webhook's informer had not seen "big" yet (bind is
				// the check that holds). Remove "over", or every later
				// try counts it too and reads 42000.
				if err := e.kube.CoreV1().Pods("ai-team").Delete(ctx, "over", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
					return fmt.Errorf("admitted over quota, and deleting it: %w", err)
				}
				return fmt.Errorf("admitted over quota")
			}
			return harness.Contains(err.Error(), "namespace ai-team: gpumem quota 40000 MiB, in use 38000, this pod is charged 4000")
		})
	})

	t.Run("opt-out namespace is left alone", func(t *testing.T) {
		harness.EnsureNamespace(t, e.kube, "opted-out", map[string]string{"vgpud.io/webhook": "ignore"})
		p, err := e.kube.CoreV1().Pods("opted-out").Create(ctx, gpuPod("x", map[string]string{"nvidia.com/gpumem": "1000"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.SchedulerName != "default-scheduler" {
			t.Errorf("schedulerName %q in an opted-out namespace", p.Spec.SchedulerName)
		}
		if _, ok := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok {
			t.Error("nvidia.com/gpu added in an opted-out namespace")
		}
	})

	t.Run("failover after SIGKILL and after SIGTERM", func(t *testing.T) {
		b := e.start(t, "vgpud-b", listen)
		time.Sleep(2 * time.Second) // b is campaigning
		if err := a.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		// The webhook goes unanswered until b leads; the vgpud-gpu-pods
		// policy admits GPU pods for vgpud-scheduler meanwhile.
		n, refused := 0, 0
		harness.Eventually(t, 30*time.Second, "vgpud-b labelled the only leader, GPU pods admitted throughout", func() error {
			n++
			p, err := pods.Create(ctx, gpuPod("during-failover-"+strconv.Itoa(n), map[string]string{"nvidia.com/gpumem": "1000"}), metav1.CreateOptions{})
			if err != nil {
				refused++
				return err
			}
			if p.Spec.SchedulerName != "vgpud-scheduler" {
				t.Fatalf("a GPU pod created during failover escaped to %q", p.Spec.SchedulerName)
			}
			if l := e.leaders(t); len(l) != 1 || l[0] != "vgpud-b" {
				return fmt.Errorf("leaders %v", l)
			}
			return nil
		})
		t.Logf("SIGKILL of the leader -> vgpud-b labelled leader after %.2f s; %d GPU pods created meanwhile, %d refused", time.Since(killed).Seconds(), n, refused)
		if refused > 0 {
			t.Errorf("%d creates refused during the failover", refused)
		}
		// Every GPU pod in the namespace went to our scheduler, none escaped.
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "during-failover") && p.Spec.SchedulerName != "vgpud-scheduler" {
				t.Errorf("%s has schedulerName %q", p.Name, p.Spec.SchedulerName)
			}
		}

		e.start(t, "vgpud-a", listen)
		time.Sleep(2 * time.Second)
		if err := b.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		termed := time.Now()
		if err := b.Cmd.Wait(); err != nil {
			t.Errorf("SIGTERM: vgpud exited with %v, want a clean exit", err)
		}
		harness.Eventually(t, 15*time.Second, "vgpud-a leads again", func() error {
			if l := e.leaders(t); len(l) != 1 || l[0] != "vgpud-a" {
				return fmt.Errorf("leaders %v", l)
			}
			return e.readyz(caPEM)
		})
		t.Logf("SIGTERM of the leader -> new leader labelled and ready: %.2f s", time.Since(termed).Seconds())
	})
}

// TestExtenderFilterFromAPIState: a Node carrying an inventory annotation
// and allocatable GPUs, and a pod holding most of one GPU, reach the
// leader's cache through real informers; /filter answers from them.
func TestExtenderFilterFromAPIState(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.applyWebhookConfig(t)
	e.start(t, "vgpud-a", listen)
	inv := `{"version":1,"gpus":[{"uuid":"GPU-e2e-0","index":0,"model":"NVIDIA A100","memoryMiB":40000,"cores":100,"split":10,"numa":0,"healthy":true}]}`
	for _, name := range []string{"gpu-node", "no-plugin"} {
		n, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"vgpud.io/gpus": inv, "vgpud.io/plugin": "serving"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "gpu-node" {
			n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("10")}
			n.Status.Capacity = n.Status.Allocatable
			if _, err := e.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	harness.EnsureNamespace(t, e.kube, "fill", nil)
	holder := gpuPod("holder", map[string]string{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"})
	holder.Annotations = map[string]string{"vgpud.io/assignment": `{"version":1,"node":"gpu-node","containers":[{"name":"work","gpus":[{"uuid":"GPU-e2e-0","memoryMiB":30000,"cores":0}]}]}`}
	// The previous test's leader was SIGKILLed: the Lease runs out first.
	harness.Eventually(t, 30*time.Second, "holder pod admitted by the new leader", func() error {
		p, err := e.kube.CoreV1().Pods("fill").Create(ctx, holder, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// The policy was re-created above, and the apiserver takes a moment
		// to apply it: a pod admitted before then keeps default-scheduler,
		// and the books rightly ignore its assignment.
		if p.Spec.SchedulerName != "vgpud-scheduler" {
			_ = e.kube.CoreV1().Pods("fill").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			return fmt.Errorf("holder admitted with schedulerName %q before the gpu-pods policy was in effect", p.Spec.SchedulerName)
		}
		return nil
	})

	var s *corev1.Secret
	harness.Eventually(t, 10*time.Second, "the leader's vgpud-tls Secret", func() error {
		var err error
		s, err = e.kube.CoreV1().Secrets(ns).Get(ctx, "vgpud-tls", metav1.GetOptions{})
		return err
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.Data["ca.crt"])
	// Anyone on the network but kube-scheduler is refused at the handshake.
	anonymous := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: webhookHost}}}
	for _, verb := range []string{"filter", "prioritize", "bind"} {
		if resp, err := anonymous.Post("https://"+extListen+"/"+verb, "application/json", strings.NewReader(`{}`)); err == nil {
			resp.Body.Close()
			t.Fatalf("/%s answered a caller without kube-scheduler's client certificate: %s", verb, resp.Status)
		}
	}
	cert, err := tls.X509KeyPair(s.Data["scheduler.crt"], s.Data["scheduler.key"])
	if err != nil {
		t.Fatalf("kube-scheduler's client certificate in the Secret: %v", err)
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: webhookHost, Certificates: []tls.Certificate{cert}}}}
	filter := func(mem string, nodes ...string) (map[string]any, error) {
		names, _ := json.Marshal(nodes)
		body := `{"Pod":{"metadata":{"name":"ask","namespace":"fill"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"` + mem + `"}}}]}},"NodeNames":` + string(names) + `}`
		resp, err := client.Post("https://"+extListen+"/filter", "application/json", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		return out, json.NewDecoder(resp.Body).Decode(&out)
	}
	harness.Eventually(t, 20*time.Second, "a 10001 MiB pod fits nowhere: 30000 of 40000 MiB are held", func() error {
		res, err := filter("10001", "gpu-node")
		if err != nil {
			return err
		}
		failed, _ := res["FailedNodes"].(map[string]any)
		if !strings.Contains(fmt.Sprint(failed["gpu-node"]), "largest free 10000 MiB < 10001") {
			return fmt.Errorf("gpu-node: %v", res)
		}
		return nil
	})
	// A node kube-scheduler offers though the books show no registered
	// plugin is one whose plugin is coming back: while no node fits, the
	// answer is an error, which kube-scheduler retries within seconds.
	res, err := filter("10001", "gpu-node", "no-plugin")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fmt.Sprint(res["Error"]), "vgpud is restarting on no-plugin: retrying") {
		t.Fatalf("with no node fitting and no-plugin's plugin away: %v", res)
	}
	res, err = filter("9000", "gpu-node", "no-plugin")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res["NodeNames"]) != "[gpu-node]" {
		t.Fatalf("a 9000 MiB pod must fit gpu-node: %v", res)
	}

	// /bind writes the assignment and creates a real Binding.
	ask, err := e.kube.CoreV1().Pods("fill").Create(ctx, gpuPod("ask", map[string]string{"nvidia.com/gpumem": "9000"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"PodName":"ask","PodNamespace":"fill","PodUID":%q,"Node":"gpu-node"}`, ask.UID)
	resp, err := client.Post("https://"+extListen+"/bind", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var bound map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&bound)
	resp.Body.Close()
	if bound["Error"] != "" {
		t.Fatalf("bind: %s", bound["Error"])
	}
	got, err := e.kube.CoreV1().Pods("fill").Get(ctx, "ask", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := protocol.DecodeAssignment(got.Annotations[wellknown.AnnotationAssignment])
	if err != nil || got.Spec.NodeName != "gpu-node" || a.Containers[0].GPUs[0].UUID != "GPU-e2e-0" || a.Containers[0].GPUs[0].MemoryMiB != 9000 || got.Annotations[wellknown.AnnotationPhase] != "bound" {
		t.Fatalf("after bind: nodeName %q, annotations %v (%v)", got.Spec.NodeName, got.Annotations, err)
	}
	// The GPU now has 1000 MiB left: the next 9000 MiB pod fits nowhere.
	res, err = filter("9000", "gpu-node")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res["NodeNames"]) != "[]" {
		t.Fatalf("after bind the GPU is full, yet: %v", res)
	}
}
