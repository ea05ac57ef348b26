// Package apicalls counts the process's requests to the apiserver, so what
// a bind costs the apiserver is measured, not assumed.
package apicalls

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter counts the process's requests to the apiserver by verb and
// resource, so what a bind costs the apiserver is measured, not assumed.
type Counter struct {
	total *prometheus.CounterVec
}

// New registers vgpud_api_requests_total on reg.
func New(reg prometheus.Registerer) *Counter {
	a := &Counter{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vgpud_api_requests_total",
		Help: "Requests this process sent to the apiserver, by verb (the HTTP method, or watch) and resource (with its subresource, as pods/binding).",
	}, []string{"verb", "resource"})}
	reg.MustRegister(a.total)
	return a
}

// Wrap is a rest.Config WrapTransport that counts each request.
func (a *Counter) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		verb := strings.ToLower(r.Method)
		if r.URL.Query().Get("watch") == "true" {
			verb = "watch"
		}
		a.total.WithLabelValues(verb, resourceOf(r.URL.Path)).Inc()
		return next.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// resourceOf reads the resource, and subresource if any, from an API path:
// /api/v1/namespaces/ai/pods/p1/binding is pods/binding.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) > 2 {
		return parts[0] + "/" + parts[2]
	}
	return parts[0]
}
