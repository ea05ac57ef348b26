package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/vgpud/vgpud/internal/process"
	"github.com/vgpud/vgpud/manifests"
)

// validEnv is the minimum a DaemonSet replica gets from the downward API.
var validArgs = []string{"--node-name=n1", "--pod-name=vgpud-abc", "--pod-namespace=vgpud-system"}

func TestRunRejectsInvalidSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // every fragment must be in the one line for the flag
	}{
		{[]string{"--gpu-backend=nonsense"}, []string{"--gpu-backend=nonsense", "nvml", "mock:dgxa100", "fake:"}},
		{[]string{"--split=0"}, []string{"--split=0", "1..1000"}},
		{[]string{"--memory-scaling=-1"}, []string{"--memory-scaling=-1", "above 0"}},
		{[]string{"--core-scaling=0"}, []string{"--core-scaling=0"}},
		{[]string{"--log-level=loud"}, []string{"--log-level=loud", "debug, info, warn or error"}},
		{[]string{"--log-format=xml"}, []string{"--log-format=xml", "json"}},
		{[]string{"--roles=node,cook"}, []string{"--roles=node,cook", "node, cluster"}},
		{[]string{"--node-policy=random"}, []string{"--node-policy=random", "binpack or spread"}},
		{[]string{"--gpu-policy=x"}, []string{"--gpu-policy=x", "chain of binpack or spread"}},
		{[]string{"--lease-duration=1s", "--lease-renew-deadline=2s"}, []string{"--lease-duration=1s", "--lease-renew-deadline"}},
		{[]string{"--lease-duration=4500ms"}, []string{"--lease-duration=4.5s", "whole seconds"}},
		{[]string{"--default-gpumem-percentage=0"}, []string{"--default-gpumem-percentage=0", "1..100"}},
		{[]string{"--bind-wait=0s"}, []string{"--bind-wait=0s", "above 0"}},
		{[]string{"--device-plugin-dir="}, []string{"--device-plugin-dir"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append(append([]string{"vgpud", "run"}, validArgs...), tc.args...)
			code := runMain(args, &out, &errOut)
			if code != 2 {
				t.Fatalf("exit code %d, want 2; stderr:\n%s", code, errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("want one line naming the flag, got %d:\n%s", len(lines), errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("message %q does not mention %q", lines[0], w)
				}
			}
		})
	}
}

func TestMissingDownwardAPINamesTheVariable(t *testing.T) {
	cfg := defaultConfig()
	err := cfg.validate()
	if err == nil {
		t.Fatal("want an error without NODE_NAME/POD_NAME/POD_NAMESPACE")
	}
	for _, w := range []string{"NODE_NAME", "POD_NAME", "POD_NAMESPACE"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %s: %v", w, err)
		}
	}
	// A node-only replica needs no pod identity.
	cfg.Process.Roles = []string{process.RoleNode}
	cfg.Process.NodeName = "n1"
	if err := cfg.validate(); err != nil {
		t.Errorf("node-only config: %v", err)
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	t.Setenv("VGPUD_SPLIT", "0")
	var out, errOut bytes.Buffer
	code := runMain(append([]string{"vgpud", "run"}, validArgs...), &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "--split=0") {
		t.Fatalf("VGPUD_SPLIT=0 not honoured: code %d, stderr %q", code, errOut.String())
	}
}

func TestDefaultsAreValid(t *testing.T) {
	cfg := defaultConfig()
	cfg.Process.NodeName, cfg.Process.PodName, cfg.Process.PodNamespace = "n1", "p", "ns"
	if err := cfg.validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
}

func TestHelpListsCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runMain([]string{"vgpud", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, cmd := range []string{"run", "inspect", "version"} {
		if !strings.Contains(out.String(), "\n   "+cmd+" ") {
			t.Errorf("help does not list %q:\n%s", cmd, out.String())
		}
	}
}

func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runMain([]string{"vgpud", "version"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.HasPrefix(out.String(), "vgpud "+version+" (commit "+commit) {
		t.Errorf("version output %q", out.String())
	}
}

// A list flag's entries are trimmed and its empty ones dropped, from
// the command line and the environment alike.
func TestListFlagsDropEmptyEntries(t *testing.T) {
	t.Setenv("VGPUD_GPU_AGENT_ACCOUNTS", "a, b,")
	cfg := defaultConfig()
	var flags []cli.Flag
	for _, g := range flagGroups(&cfg) {
		flags = append(flags, g.flags...)
	}
	app := &cli.App{Flags: flags, Action: func(*cli.Context) error { return nil }}
	if err := app.Run([]string{"vgpud", "--exclude-gpus= 0, GPU-1,", "--roles=node,"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Node.GPUs.ExcludeGPUs, "|"); got != "0|GPU-1" {
		t.Errorf("--exclude-gpus read as %q", got)
	}
	if got := strings.Join(cfg.Node.Identity.GPUAgentAccounts, "|"); got != "a|b" {
		t.Errorf("VGPUD_GPU_AGENT_ACCOUNTS read as %q", got)
	}
	if got := strings.Join(cfg.Process.Roles, "|"); got != "node" {
		t.Errorf("--roles read as %q", got)
	}
}

// The leader patches the caBundle of the webhook configuration the
// manifest installs, and its serving certificate names the Service the
// webhook calls: their default names agree.
func TestManifestNamesWhatTheLeaderKeeps(t *testing.T) {
	mwc, err := manifests.WebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	def := defaultConfig().Cluster.TLS
	if mwc.Name != def.WebhookConfigName {
		t.Errorf("webhook configuration %q; --webhook-config-name defaults to %q", mwc.Name, def.WebhookConfigName)
	}
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != def.ServiceName {
			t.Errorf("webhook %s does not call Service %q (--service-name)", w.Name, def.ServiceName)
		}
	}
}

// The vgpud-gpu-pods policy gives GPU pods the scheduler the webhook and
// the extender expect, and reads the resource names vgpud serves: their
// defaults agree.
func TestGPUPodsPolicyNamesTheDefaults(t *testing.T) {
	policy, _, err := manifests.GPUPodsPolicy()
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	sets := false
	for _, m := range policy.Spec.Mutations {
		if m.ApplyConfiguration != nil && strings.Contains(m.ApplyConfiguration.Expression, "schedulerName: '"+cfg.Process.SchedulerName+"'") {
			sets = true
		}
	}
	if !sets {
		t.Errorf("no mutation of the vgpud-gpu-pods policy sets schedulerName %q (--scheduler-name)", cfg.Process.SchedulerName)
	}
	for _, name := range []string{cfg.Process.Resources.GPU, cfg.Process.Resources.GPUMem, cfg.Process.Resources.GPUMemPercentage, cfg.Process.Resources.GPUCores} {
		if !strings.Contains(policy.Spec.MatchConditions[0].Expression, "'"+name+"'") {
			t.Errorf("the vgpud-gpu-pods policy's match does not name %s", name)
		}
	}
}

// The release the binary reports is the chart's appVersion: the two move
// together (docs/install.md).
func TestVersionIsTheChartsAppVersion(t *testing.T) {
	raw, err := os.ReadFile("charts/vgpud/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version || "v"+chart.Version != version {
		t.Errorf("version.go says %s, the chart's version %s and appVersion %s: move them together", version, chart.Version, chart.AppVersion)
	}
	manifest, err := os.ReadFile("manifests/vgpud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), "image: ghcr.io/vgpud/vgpud:"+version+"\n") {
		t.Errorf("manifests/vgpud.yaml does not name the image ghcr.io/vgpud/vgpud:%s: move it with version.go", version)
	}
}

// A retired setting stops the binary with what replaced it, from the
// command line and from the environment alike.
func TestRetiredExemptNamespacesSaysWhatReplacedIt(t *testing.T) {
	run := func(args ...string) error {
		cfg := defaultConfig()
		var flags []cli.Flag
		for _, g := range flagGroups(&cfg) {
			flags = append(flags, g.flags...)
		}
		app := &cli.App{Flags: flags, Action: func(*cli.Context) error { return nil }}
		return app.Run(append([]string{"vgpud"}, args...))
	}
	for name, err := range map[string]error{
		"flag": run("--nri-exempt-namespaces=gpu-operator"),
		"env":  func() error { t.Setenv("VGPUD_NRI_EXEMPT_NAMESPACES", "gpu-operator"); return run() }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "vgpud.io/gpu-agents=true") || !strings.Contains(err.Error(), "--gpu-agent-accounts") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
