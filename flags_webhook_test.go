package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/internal/process"
	"github.com/vgpud/vgpud/webhook"
)

func TestWebhookFlagsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--webhook-core-policy=always"}, []string{"--webhook-core-policy=always", "default, force or empty"}},
		{[]string{"--webhook-runtime-class=Not_A_Name"}, []string{"--webhook-runtime-class=Not_A_Name"}},
		{[]string{"--tls-secret-name="}, []string{`--tls-secret-name=""`}},
		{[]string{"--webhook-config-name=UPPER"}, []string{"--webhook-config-name=UPPER"}},
		{[]string{"--service-name=1svc"}, []string{"--service-name=1svc", "Service name"}},
		{[]string{"--tls-cert-validity=10m", "--tls-cert-renew-before=1m"}, []string{"--tls-cert-validity=10m0s", "at least 1h"}},
		{[]string{"--tls-cert-validity=24h", "--tls-cert-renew-before=48h"}, []string{"--tls-cert-renew-before=48h0m0s", "shorter than --tls-cert-validity (24h0m0s)"}},
		{[]string{"--scheduler-name="}, []string{`--scheduler-name=""`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append(append([]string{"vgpud", "run"}, validArgs...), tc.args...)
			if code := runMain(args, &out, &errOut); code != 2 {
				t.Fatalf("exit code %d, want 2; stderr:\n%s", code, errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("want one line naming the flag, got:\n%s", errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("message %q does not mention %q", lines[0], w)
				}
			}
		})
	}
}

func TestWebhookFlagsFromEnvironment(t *testing.T) {
	t.Setenv("VGPUD_WEBHOOK_CORE_POLICY", "sometimes")
	var out, errOut bytes.Buffer
	code := runMain(append([]string{"vgpud", "run"}, validArgs...), &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "--webhook-core-policy=sometimes") {
		t.Fatalf("VGPUD_WEBHOOK_CORE_POLICY not honoured: code %d, stderr %q", code, errOut.String())
	}
}

func TestClusterValidationOnlyForClusterRole(t *testing.T) {
	cfg := defaultConfig()
	cfg.Process.NodeName = "n1"
	cfg.Process.Roles = []string{process.RoleNode}
	cfg.Cluster.TLS.CertValidity = time.Minute
	cfg.Webhook.CorePolicy = "sometimes"
	if err := cfg.validate(); err != nil {
		t.Fatalf("node-only replica judged on cluster settings: %v", err)
	}
	cfg.Process.Roles = []string{process.RoleCluster}
	cfg.Process.PodName, cfg.Process.PodNamespace = "p", "ns"
	err := cfg.validate()
	if err == nil || !strings.Contains(err.Error(), "--tls-cert-validity") || !strings.Contains(err.Error(), "--webhook-core-policy") {
		t.Fatalf("cluster replica: got %v, want the cert validity and the core policy named", err)
	}
	if err := webhook.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
