package master

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

// NewHTTPClient returns an HTTP client that speaks unencrypted HTTP/2 (h2c),
// as gRPC needs, to a master.
func NewHTTPClient() *http.Client {
	t := &http.Transport{
		Protocols:         new(http.Protocols),
		ForceAttemptHTTP2: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:   &tls.Config{},
	}
	t.Protocols.SetUnencryptedHTTP2(true)
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second}
	return &http.Client{Transport: t}
}

// NewClient returns a gRPC client of the master at addr ("host:port" or a URL)
// that sends token with every request.
func NewClient(httpClient *http.Client, addr, token string) roverv1connect.MasterServiceClient {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return roverv1connect.NewMasterServiceClient(httpClient, addr,
		connect.WithGRPC(),
		connect.WithInterceptors(tokenInterceptor{token: token}),
		connect.WithReadMaxBytes(8<<20),
		connect.WithCompressMinBytes(compressMinBytes))
}

// Retryable reports whether an RPC error is worth retrying: the master is
// unreachable or restarting.
func Retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeAborted:
		return !isCtxDone(err)
	}
	return false
}

func isCtxDone(err error) bool {
	return err == context.Canceled
}

// compressMinBytes keeps small messages uncompressed: compressing a heartbeat
// costs more CPU than sending it.
const compressMinBytes = 16 << 10
