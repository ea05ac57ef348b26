package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestJSONLogsAndKlogShareTheHandler(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, Options{LogLevel: "info", LogFormat: "json"})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", 1)
	klog.InfoS("from client-go", "x", "y")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %q", buf.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
	}
	if !strings.Contains(lines[1], "from client-go") {
		t.Errorf("klog line missing: %q", lines[1])
	}
}

func TestTextLogsHaveNoColourOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, Options{LogLevel: "debug", LogFormat: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("plain")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "plain") {
		t.Errorf("want plain text, got %q", buf.String())
	}
}
