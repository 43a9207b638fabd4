package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/roverml/rover/internal/store/kubestore"
)

// openKubeState opens the master's state kept in the Kubernetes API
// (--state-kube), reached with the pod's in-cluster config or else the
// kubeconfig of $KUBECONFIG (or ~/.kube/config).
func openKubeState(ctx context.Context, namespace, name string, log *slog.Logger) (*kubestore.Store, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("--state-kube: no in-cluster config and no usable kubeconfig ($KUBECONFIG or ~/.kube/config): %w", err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	// Protobuf: snapshots and journal entries travel as bytes, not base64.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "rover-master"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--state-kube: client for %s: %w", cfg.Host, err)
	}
	s, err := kubestore.Open(ctx, kubestore.Options{Client: cs, Namespace: namespace, Name: name, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--state-kube %s/%s: %w", namespace, name, err)
	}
	return s, nil
}
