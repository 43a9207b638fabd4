// Package client is how programs talk to a job's master: the HTTP client
// (cleartext HTTP/2, or HTTP/2 over TLS verified with a CA bundle, and what a
// failed handshake means), the gRPC client that carries the job's token,
// where the token comes from, and which errors are worth another try (a
// job's configuration, which an agent joins with, is package jobconfig's).
// The node agent, `rover status` and the benchmarks use it; the master
// imports it only for what both ends must agree on (the token header,
// message limits).
//
// It owns no retry loop (package retry does) and no server side (package
// master does), and it never imports package master.
//
//	token, err := client.Token(tokenFile, os.Getenv)
//	if err != nil { ... }
//	via := client.TLS{CAFile: caFile} // the zero TLS is cleartext
//	hc, err := via.HTTPClient()
//	if err != nil { ... }
//	defer hc.CloseIdleConnections()
//	m := client.New(hc, via.URL("master-host:29400"), token)
//	err = retry.Do(ctx, retry.Policy{Limit: time.Minute}, client.Retryable,
//		func(ctx context.Context) error {
//			_, err := m.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
//			return err
//		})
package client
