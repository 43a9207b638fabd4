package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/roverml/rover/internal/kubemaster"
	"github.com/roverml/rover/internal/store/kubestore"
)

// openKubeState opens the master's state kept in the Kubernetes API
// (--state-kube), reached with the pod's in-cluster config or else the
// kubeconfig of $KUBECONFIG (or ~/.kube/config).
func openKubeState(ctx context.Context, c *masterConfig, log *slog.Logger) (*kubestore.Store, error) {
	namespace, name := c.StateKube.Namespace, c.StateKube.Name
	cfg, err := kubeConfig("")
	if err != nil {
		return nil, fmt.Errorf("--state-kube: %w", err)
	}
	// Every group commit is a request: client-go's default of 5 a second
	// would pace the job's transitions.
	cfg = kubemaster.ClientConfig(cfg, c.KubeQPS, c.KubeBurst)
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
