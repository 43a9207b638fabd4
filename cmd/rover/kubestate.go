package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/roverml/rover/internal/store/kubestore"
)

// openKubeState opens the master's state kept in the Kubernetes API
// (--state-kube), reached with the pod's in-cluster config or else the
// kubeconfig of $KUBECONFIG (or ~/.kube/config).
func openKubeState(ctx context.Context, namespace, name string, log *slog.Logger) (*kubestore.Store, error) {
	cfg, err := kubeConfig("")
	if err != nil {
		return nil, fmt.Errorf("--state-kube: %w", err)
	}
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
