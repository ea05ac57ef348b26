// Command promcheck runs Prometheus's own Kubernetes discovery with the
// job manifests/monitoring/scrape.yaml ships, so the end-to-end suite
// exercises that job as shipped: Debian's Prometheus is built without
// Kubernetes discovery. It writes what the job's kubernetes_sd_configs
// find, with their meta labels, as file_sd targets for that Prometheus,
// whose relabelling (the job's own) decides what is scraped.
//
// It is its own module so that Prometheus's dependencies never reach
// vgpud's go.mod.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/discovery/targetgroup"
)

func main() {
	scrape := flag.String("scrape", "", "the scrape configuration (manifests/monitoring/scrape.yaml)")
	job := flag.String("job", "vgpud", "the job whose discovery to run")
	kubeconfig := flag.String("kubeconfig", "", "how to reach the cluster from outside it: the one change made to the job's kubernetes_sd_configs")
	out := flag.String("out", "", "file_sd JSON to write, replaced on every change")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *scrape, *job, *kubeconfig, *out); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "promcheck:", err)
		os.Exit(1)
	}
}

// discoveryOf loads path as Prometheus does and returns job's service
// discovery, each Kubernetes one pointed at kubeconfig.
func discoveryOf(path, job, kubeconfig string) (discovery.Configs, error) {
	cfg, err := config.LoadFile(path, false, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != job {
			continue
		}
		k8s := 0
		for _, d := range sc.ServiceDiscoveryConfigs {
			if k, ok := d.(*kubernetes.SDConfig); ok {
				k.KubeConfig = kubeconfig
				k8s++
			}
		}
		if k8s == 0 {
			return nil, fmt.Errorf("%s: job %s has no kubernetes_sd_configs", path, job)
		}
		return sc.ServiceDiscoveryConfigs, nil
	}
	return nil, fmt.Errorf("%s has no job %s", path, job)
}

func run(ctx context.Context, scrape, job, kubeconfig, out string) error {
	sds, err := discoveryOf(scrape, job, kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	metrics, err := discovery.CreateAndRegisterSDMetrics(reg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := discovery.NewManager(ctx, log, reg, metrics)
	if m == nil {
		return errors.New("discovery manager: nil")
	}
	if err := m.ApplyConfig(map[string]discovery.Configs{job: sds}); err != nil {
		return err
	}
	go func() { _ = m.Run() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case all := <-m.SyncCh():
			if err := write(out, all[job]); err != nil {
				return err
			}
		}
	}
}

// fileSD is one file_sd target group.
type fileSD struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// write writes groups as file_sd JSON, one group per target, each with
// its group's labels and its own.
func write(path string, groups []*targetgroup.Group) error {
	list := []fileSD{}
	for _, g := range groups {
		for _, t := range g.Targets {
			labels := map[string]string{}
			for k, v := range g.Labels {
				labels[string(k)] = string(v)
			}
			for k, v := range t {
				labels[string(k)] = string(v)
			}
			addr := labels[model.AddressLabel]
			delete(labels, model.AddressLabel)
			list = append(list, fileSD{Targets: []string{addr}, Labels: labels})
		}
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", raw, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
