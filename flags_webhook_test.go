package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/webhook"
)

func TestWebhookFlagsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--webhook-default-gpu-count=0"}, []string{"--webhook-default-gpu-count=0", "1..64"}},
		{[]string{"--webhook-core-policy=always"}, []string{"--webhook-core-policy=always", "default, force, disable"}},
		{[]string{"--webhook-runtime-class=Not_A_Name"}, []string{"--webhook-runtime-class=Not_A_Name"}},
		{[]string{"--webhook-secret-name="}, []string{`--webhook-secret-name=""`}},
		{[]string{"--webhook-config-name=UPPER"}, []string{"--webhook-config-name=UPPER"}},
		{[]string{"--webhook-service-name=1svc"}, []string{"--webhook-service-name=1svc", "Service name"}},
		{[]string{"--webhook-cert-validity=10m", "--webhook-cert-renew-before=1m"}, []string{"--webhook-cert-validity=10m0s", "at least 1h"}},
		{[]string{"--webhook-cert-validity=24h", "--webhook-cert-renew-before=48h"}, []string{"--webhook-cert-renew-before=48h0m0s", "shorter than --webhook-cert-validity (24h0m0s)"}},
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

func TestWebhookValidationOnlyForClusterRole(t *testing.T) {
	cfg := defaultConfig()
	cfg.NodeName = "n1"
	cfg.Roles = []string{roleNode}
	cfg.Webhook.CertValidity = time.Minute
	if err := cfg.validate(); err != nil {
		t.Fatalf("node-only replica judged on webhook settings: %v", err)
	}
	cfg.Roles = []string{roleCluster}
	cfg.PodName, cfg.PodNamespace = "p", "ns"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "--webhook-cert-validity") {
		t.Fatalf("cluster replica: got %v, want the cert validity named", err)
	}
	if err := validateWebhook(webhook.DefaultConfig()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
