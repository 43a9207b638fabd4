package client

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
)

// What a master and its clients agree on.
const (
	// AuthHeader carries the job's token in every request, after AuthScheme:
	// "Authorization: Bearer <token>".
	AuthHeader = "Authorization"
	AuthScheme = "Bearer "
	// ReadMaxBytes bounds one message a client reads from a master. (The
	// master bounds each method's requests by the largest valid one.)
	ReadMaxBytes = 8 << 20
	// CompressMinBytes keeps small messages uncompressed: compressing a
	// heartbeat costs more CPU than sending it.
	CompressMinBytes = 16 << 10
	// MaxBatchOps is the most ops one BatchShards call may carry.
	MaxBatchOps = 1024
	// IncarnationHeader carries an agent process's incarnation id on its
	// session: a random id each `rover run` process makes once. Two agents
	// that claim the same node id (the same --node-rank on one host, a
	// copied --node-id) have different ones, while an agent that
	// reconnects keeps its own: the master refuses a second live agent
	// of a node and lets the agent's own reconnects, and a restarted
	// agent once the old one is gone, resume it. Sessions without one are
	// not checked.
	IncarnationHeader = "Rover-Agent-Incarnation"
)

// NewHTTPClient returns an HTTP client that speaks unencrypted HTTP/2 (h2c),
// as gRPC needs, to a master. It pings an idle connection, so that a master
// that vanished without closing it is noticed within about 25 seconds. For a
// master that serves TLS, see TLS.HTTPClient.
func NewHTTPClient() *http.Client {
	t := newTransport()
	t.Protocols.SetUnencryptedHTTP2(true)
	diag := &diagnosis{}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialMaster(ctx, network, addr, firstAnswerTimeout, true, "its first bytes", diag)
	}
	return &http.Client{Transport: &diagnosingTransport{base: t, diag: diag}}
}

// newTransport is the HTTP/2 transport of every client of a master, with no
// protocol enabled yet.
func newTransport() *http.Transport {
	t := &http.Transport{
		Protocols:         new(http.Protocols),
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{},
	}
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second}
	return t
}

// New returns a gRPC client of the master at addr ("host:port" or a URL)
// that sends token with every request.
func New(httpClient *http.Client, addr, token string) roverv1connect.MasterServiceClient {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return roverv1connect.NewMasterServiceClient(httpClient, addr,
		connect.WithGRPC(),
		connect.WithInterceptors(tokenInterceptor{token: token}),
		connect.WithReadMaxBytes(ReadMaxBytes),
		connect.WithCompressMinBytes(CompressMinBytes))
}

// tokenInterceptor adds the job's token to every request.
type tokenInterceptor struct{ token string }

var _ connect.Interceptor = tokenInterceptor{}

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(AuthHeader, AuthScheme+t.token)
		return next(ctx, req)
	}
}

func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set(AuthHeader, AuthScheme+t.token)
		return conn
	}
}

// WrapStreamingHandler is never called: the interceptor is a client's.
func (t tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
