//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vgpud/vgpud/scripts/harness"
)

// The previous release, as scripts/images.sh builds its image (under the
// name its manifest gives vgpud, imported on every node): its tag, and
// its commit for a clone without tags.
const (
	previousRelease = "v0.1.0"
	previousCommit  = "d62b59b"
	previousImage   = "ghcr.io/vgpud/vgpud:" + previousRelease
)

// upgradeFromRelease installs the previous release from its own manifest
// (through its mock overlay) in place of what a install left, then
// upgrades to this one as docs/install-upgrade-and-uninstall.md says (kubectl apply of the
// pinned manifest) while a tenant keeps creating GPU pods: none may be
// refused or fail. The metrics renamed in this release are exported
// under both names afterwards.
func upgradeFromRelease(t *testing.T, e env, nodes []string) {
	ctx := context.Background()
	repo := filepath.Join(e.scripts, "..")
	run := func(what string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	rev := strings.TrimSpace(run("the previous release's commit", "bash", "-c",
		fmt.Sprintf("git rev-parse -q --verify 'refs/tags/%s^{commit}' || git rev-parse --verify '%s^{commit}'", previousRelease, previousCommit)))

	// What the install left goes, as docs/install-upgrade-and-uninstall.md
	// removes it: the chart's pre-delete hook reverts every node first.
	// v0.1.0 then runs on nodes without vgpud's drop-in (it set up none),
	// and this release's init containers set them up again.
	start := time.Now()
	run("helm uninstall", "bash", "-c", `"$(scripts/helm.sh)" uninstall vgpud --namespace vgpud-system --wait --timeout 120s`)
	harness.Eventually(t, 120*time.Second, "vgpud's pods gone", func() error {
		pods, err := e.kube.CoreV1().Pods(system).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left in %s", len(pods.Items), system)
		}
		return nil
	})
	t.Logf("helm uninstall: vgpud gone in %v", time.Since(start).Round(time.Millisecond))
	// kube-apiserver up to v1.36 resolves a binding's built-in paramKind
	// (the Lease and ConfigMap vgpud's policies read) no more once no
	// binding names it (kubernetes/kubernetes#130887). Helm keeps the
	// two bindings that name them, so what is installed next finds its
	// params with no restart (the fences scenario, later, checks).
	if keep, err := e.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{LabelSelector: "vgpud.io/keep=true"}); err != nil || len(keep.Items) != 2 {
		t.Fatalf("after helm uninstall, the kept bindings: %v (%v); want two", keep, err)
	}

	// The previous release, from its own manifests/.
	old := t.TempDir()
	run("the previous release's manifests", "bash", "-c", fmt.Sprintf("git archive %s manifests | tar -x -C %s", rev, old))
	start = time.Now()
	// Its manifest names ghcr.io/vgpud/vgpud:dev; scripts/images.sh
	// imported its image on every node under its own tag.
	run("kubectl apply of "+previousRelease, "bash", "-c",
		fmt.Sprintf("kubectl kustomize --load-restrictor=LoadRestrictionsNone %s/manifests/mock | sed 's|image: ghcr.io/vgpud/vgpud:dev$|image: %s|' | kubectl apply -f - >/dev/null", old, previousImage))
	e.waitServing(t, nodes)
	// The line vgpud printed: kubectl may log beside it (a websocket
	// warning from an older client).
	version := ""
	for _, l := range strings.Split(run("vgpud version", "kubectl", "-n", system, "exec", "ds/vgpud", "--", "vgpud", "version"), "\n") {
		if strings.HasPrefix(l, "vgpud ") {
			version = strings.TrimSpace(l)
		}
	}
	if !strings.HasPrefix(version, "vgpud "+previousRelease+" ") {
		t.Fatalf("the previous release runs %q, want %s", version, previousRelease)
	}
	t.Logf("%s (%s) serving from its own manifest in %v", previousRelease, version, time.Since(start).Round(time.Millisecond))

	// A tenant creates GPU pods, one every second, until the upgrade has
	// rolled out and a while after.
	ns := "e2e-release-upgrade"
	asTenant := newTenant(t, e, ns)
	var (
		mu      sync.Mutex
		created []string
		refused []string
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop); <-done }) }
	// Stopped however the test ends, so no creator outlives it.
	defer halt()
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			name := fmt.Sprintf("during-%03d", i)
			pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  containers:\n  - name: c\n    image: vgpud.local/busybox:1\n    command: [sleep, infinity]\n    resources: {limits: {nvidia.com/gpumem: \"500\", nvidia.com/gpucores: \"2\"}}\n", name)
			out, err := asTenant(pod, "create", "-f", "-")
			mu.Lock()
			if err != nil {
				refused = append(refused, name+": "+strings.TrimSpace(out))
			} else {
				created = append(created, name)
			}
			mu.Unlock()
		}
	}()
	time.Sleep(5 * time.Second)

	// The upgrade: this release's manifest, pinned to its image, applied
	// over the previous one (scripts/install.sh waits for the rollout).
	start = time.Now()
	run("kubectl apply of this release", "env", "VGPUD_INSTALL=manifest", e.scripts+"/install.sh")
	rolled := time.Since(start)
	time.Sleep(10 * time.Second)
	halt()
	mu.Lock()
	defer mu.Unlock()
	if len(refused) > 0 {
		t.Fatalf("%d of %d creates refused during the upgrade: %v", len(refused), len(refused)+len(created), refused)
	}
	e.waitRunning(t, ns, created, 3*time.Minute)
	t.Logf("upgrade %s -> this release rolled out in %v; %d GPU pods created meanwhile by a tenant, 0 refused, all running", previousRelease, rolled.Round(time.Millisecond), len(created))

	// The renamed metrics, under both names for this release.
	leader, err := e.leader()
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the old metric names beside the new", func() error {
		raw, err := e.scrape(leader)
		if err != nil {
			return err
		}
		byGPU := func(l map[string]string) string { return l["uuid"] }
		mib, _, err := harness.MetricSums(strings.NewReader(raw), "vgpud_gpu_allocated_memory_mib", byGPU)
		if err != nil {
			return err
		}
		bytes, _, err := harness.MetricSums(strings.NewReader(raw), "vgpud_gpu_allocated_memory_bytes", byGPU)
		if err != nil {
			return err
		}
		if len(mib) == 0 || len(mib) != len(bytes) {
			return fmt.Errorf("%d GPUs under the old name, %d under the new", len(mib), len(bytes))
		}
		for uuid, v := range mib {
			if bytes[uuid] != v*(1<<20) {
				return fmt.Errorf("GPU %s: %v MiB under the old name, %v bytes under the new", uuid, v, bytes[uuid])
			}
		}
		if !strings.Contains(raw, "vgpud_build_info{") {
			return fmt.Errorf("no vgpud_build_info")
		}
		return nil
	})
	t.Logf("after the upgrade the leader exports vgpud_gpu_allocated_memory_mib and _bytes for every GPU, and vgpud_build_info")
	if err := e.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// waitServing waits, as scripts/install.sh does, for vgpud to serve: its
// DaemonSet rolled out, a leader, the webhook's caBundle, every node
// advertising nvidia.com/gpu.
func (e env) waitServing(t *testing.T, nodes []string) {
	t.Helper()
	if out, err := e.kubectl("-n", system, "rollout", "status", "ds/vgpud", "--timeout=180s"); err != nil {
		t.Fatalf("rollout: %v %s", err, out)
	}
	harness.Eventually(t, 120*time.Second, "vgpud serving", func() error {
		if _, err := e.leader(); err != nil {
			return err
		}
		for _, n := range nodes {
			if err := e.advertising(n); err != nil {
				return err
			}
		}
		out, err := e.kubectl("get", "mutatingwebhookconfiguration", "vgpud", "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
		if err != nil || strings.TrimSpace(out) == "" {
			return fmt.Errorf("no caBundle yet: %v", err)
		}
		return nil
	})
}
