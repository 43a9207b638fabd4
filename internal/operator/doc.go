// Package operator reconciles ElasticJobs (api/elastic/v1alpha1) into their
// masters: for each job a token Secret (<job>-rover-token, made once and never
// rotated), a ClusterIP Service (<job>-rover-master, port 29400) and one
// master pod at a time (<job>-rover-master-<n>, n the master's relaunches),
// all owned by the job so that deleting the job deletes them. It relaunches a
// master that crashed, was evicted or was deleted, within the job's master
// budget (annotation rover.dev/master-restart-count, default 3); honours
// spec.suspend by deleting the job's pods (the gate Kueue uses); refuses what
// the CRD's schema cannot check (what rover submit --dry-run checks, through
// jobplan.Check: the launcher line against the replicas and the like) at the
// job's creation with its admission webhook (Config.WebhookCertDir), and in
// the job's status (InvalidSpec) when the webhook is not installed; and
// writes the job's phase, conditions, times, masterRelaunches and the worker
// selector.
//
// It does not create, watch or relaunch worker pods, nor count them: the
// master does (rover master --platform kubernetes), and writes the status
// fields it owns (replicaStatuses, restartCount, relaunchCount, lastFailure),
// which the operator never writes: its status patches carry only its own
// fields.
//
// Usage (what `rover operator` does):
//
//	cfg := operator.Config{Namespace: "rover-system", LeaderElect: true}
//	cfg.Default()
//	if err := cfg.Validate(); err != nil {
//		return err
//	}
//	return operator.Run(ctx, restConfig, cfg) // until ctx ends
package operator
