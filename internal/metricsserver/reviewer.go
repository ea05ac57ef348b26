// Package metricsserver serves the process's metrics, only to scrapers
// the apiserver admits, and its readiness (/readyz) to kubelet's probe.
package metricsserver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Bounds on what callers cost the apiserver: answers are kept a while,
// refusals too, so a scraper every few seconds or a flood of one bad
// token is one review; and only a few reviews run at once, the rest are
// answered 429.
const (
	// metricsAudience is what a scraper's token must be made for (a projected
	// ServiceAccount token with this audience).
	metricsAudience = "vgpud-metrics"
	answerTTL       = 30 * time.Second
	cachedAnswers   = 1024
	maxReviews      = 4
	reviewTimeout   = 5 * time.Second
)

// Reviewer guards vgpud's /metrics the way kubebuilder projects
// do: the caller sends a bearer token, the apiserver says who it is
// (TokenReview) and whether it may get the path (SubjectAccessReview, a
// non-resource URL: a Prometheus bound to the manifest's
// vgpud-metrics-reader ClusterRole may). The per-GPU UUIDs and free memory
// there are not every pod's to read.
//
// The token must be made for metricsAudience: every replica, a compromised
// node's too, is sent it, and a token for that audience alone is worth
// nothing to the apiserver.
//
// A Reviewer authenticates and authorizes scrapes through the apiserver.
type Reviewer struct {
	tokens  authnv1client.TokenReviewsGetter
	access  authzv1client.SubjectAccessReviewsGetter
	answers *utilcache.LRUExpireCache
	slots   chan struct{}
}

// NewReviewer returns a Reviewer asking the apiserver through tokens and access.
func NewReviewer(tokens authnv1client.TokenReviewsGetter, access authzv1client.SubjectAccessReviewsGetter) *Reviewer {
	return &Reviewer{tokens: tokens, access: access, answers: utilcache.NewLRUExpireCache(cachedAnswers), slots: make(chan struct{}, maxReviews)}
}

// answer is a cached verdict: 0 allows, else the HTTP status and why.
type answer struct {
	code int
	why  string
}

// Wrap serves h only to callers the apiserver says may get the path;
// paths h does not serve are answered 404 before any review, so no
// caller makes reviews by making up paths.
func (rv *Reviewer) Wrap(h *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := h.Handler(r); pattern == "" {
			http.NotFound(w, r)
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="vgpud"`)
			http.Error(w, "vgpud's metrics need a token: send Authorization: Bearer <ServiceAccount token> of an identity bound to the vgpud-metrics-reader ClusterRole (the chart's fullnameOverride, if set, replaces vgpud)", http.StatusUnauthorized)
			return
		}
		// One answer per token and path served: a handful of paths.
		key := fmt.Sprintf("%x %s", sha256.Sum256([]byte(token)), r.URL.Path)
		a, cached := rv.answers.Get(key)
		if !cached {
			select {
			case rv.slots <- struct{}{}:
			default:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "vgpud is busy checking other scrapers' tokens; retry", http.StatusTooManyRequests)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
			ans, err := rv.review(ctx, token, r.URL.Path)
			cancel()
			<-rv.slots
			if err != nil {
				// Not cached: the apiserver may answer next time.
				http.Error(w, "checking the token with the apiserver: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			rv.answers.Add(key, ans, answerTTL)
			a = ans
		}
		if ans := a.(answer); ans.code != 0 {
			http.Error(w, ans.why, ans.code)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// review asks the apiserver who token is and whether it may get path.
func (rv *Reviewer) review(ctx context.Context, token, path string) (answer, error) {
	tr, err := rv.tokens.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{metricsAudience}}}, metav1.CreateOptions{})
	if err != nil {
		return answer{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, metricsAudience) {
		return answer{code: http.StatusUnauthorized, why: "the apiserver does not accept this token for audience " + metricsAudience + ": scrape with a ServiceAccount token made for it (a projected token with audience " + metricsAudience + ")"}, nil
	}
	u := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := rv.access.SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return answer{}, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed {
		return answer{code: http.StatusForbidden, why: fmt.Sprintf("%s may not get %s: bind it to the vgpud-metrics-reader ClusterRole (the chart's fullnameOverride, if set, replaces vgpud)", u.Username, path)}, nil
	}
	return answer{}, nil
}
