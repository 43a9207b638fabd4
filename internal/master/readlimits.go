package master

import (
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
)

// readLimits bounds the request of each method: the bytes of one message
// (each message, on the session stream) as received, before it is decoded.
// Each limit is the largest request the master's validators accept, in
// binary protobuf (what agents send), rounded up to a power of two with room
// to spare; the figures were measured with every field at its maximum. A
// request over its method's limit is refused with ResourceExhausted, naming
// the limit, before more of it is read than the limit (a Connect unary
// request that declares its length: before any of it). TestReadLimits checks
// that every method has a limit and that its largest valid request fits.
var readLimits = map[string]int{
	// A join with the most memory snapshots accepted (8 for each of 4,096
	// local ranks) is 1.15 MB; later session messages are empty heartbeats.
	roverv1connect.MasterServiceSessionProcedure: 2 << 20,
	roverv1connect.MasterServiceJoinProcedure:    2 << 20,
	// One failure per failed worker, each with up to 64 KiB of text: room
	// for 127 workers' full text (as under the single limit before).
	roverv1connect.MasterServiceReportFailureProcedure: 8 << 20,
	roverv1connect.MasterServiceReportSuccessProcedure: smallRequest,
	// A reason of up to 64 KiB.
	roverv1connect.MasterServiceLeaveProcedure: 128 << 10,
	// A value of up to 1 MiB: 1.05 MB, 1.4 MB in JSON (base64).
	roverv1connect.MasterServiceSetKeyProcedure:          2 << 20,
	roverv1connect.MasterServiceGetKeyProcedure:          smallRequest,
	roverv1connect.MasterServiceGetJobProcedure:          smallRequest,
	roverv1connect.MasterServiceRegisterDatasetProcedure: smallRequest,
	roverv1connect.MasterServiceLeaseShardsProcedure:     smallRequest,
	// Up to 65,536 results: 0.98 MB.
	roverv1connect.MasterServiceCompleteShardsProcedure:  2 << 20,
	roverv1connect.MasterServiceGetPositionProcedure:     smallRequest,
	roverv1connect.MasterServiceAdvancePositionProcedure: smallRequest,
	roverv1connect.MasterServiceAppendStreamProcedure:    smallRequest,
	roverv1connect.MasterServiceGetDatasetStateProcedure: smallRequest,
	// The state GetDatasetState answered, which a client reads up to
	// client.ReadMaxBytes, and a dataset name.
	roverv1connect.MasterServiceRestoreDatasetProcedure: client.ReadMaxBytes + smallRequest,
	// Up to 1,024 ops, as the agent batches its workers' calls: 1,024
	// leases are 0.83 MB; completions carry the workers' results.
	roverv1connect.MasterServiceBatchShardsProcedure: 8 << 20,
	// A storage URL of up to 1 KiB, a path and numbers: 2.1 KB.
	roverv1connect.MasterServiceCheckpointDurableProcedure: 16 << 10,
}

const (
	// smallRequest bounds the requests of names and numbers (at most
	// 0.8 KB: a dataset name of 512 bytes and a worker name of 269).
	smallRequest = 4 << 10
	// defaultReadLimit bounds a method missing from readLimits.
	defaultReadLimit = 64 << 10
)

// methodHandler serves the master's service, each method with its read
// limit, and every other path of the service with defaultReadLimit.
func methodHandler(svc roverv1connect.MasterServiceHandler, opts ...connect.HandlerOption) http.Handler {
	byLimit := map[int]http.Handler{}
	handler := func(limit int) http.Handler {
		if h, ok := byLimit[limit]; ok {
			return h
		}
		_, h := roverv1connect.NewMasterServiceHandler(svc, append(opts, connect.WithReadMaxBytes(limit))...)
		byLimit[limit] = h
		return h
	}
	mux := http.NewServeMux()
	for procedure, limit := range readLimits {
		mux.Handle(procedure, refuseDeclaredOverLimit(procedure, limit, handler(limit)))
	}
	mux.Handle("/"+roverv1connect.MasterServiceName+"/", handler(defaultReadLimit))
	return mux
}

// refuseDeclaredOverLimit answers a Connect unary request whose declared
// length is over limit with ResourceExhausted without reading it. (Connect
// would read limit bytes, then discard the rest.) Only an uncompressed
// unary body is one message; a stream's length is that of all its messages.
func refuseDeclaredOverLimit(procedure string, limit int, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	method := procedure[strings.LastIndexByte(procedure, '/')+1:]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		unary := ct == "application/json" || ct == "application/proto" || strings.HasPrefix(ct, "application/json;")
		if enc := r.Header.Get("Content-Encoding"); unary && (enc == "" || enc == "identity") && r.ContentLength > int64(limit) {
			_ = r.Body.Close()
			_ = errs.Write(w, r, connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("a %s request is at most %d bytes (%s), this one has %d: the master refuses larger ones", method, limit, sizeText(limit), r.ContentLength)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sizeText writes n bytes in KiB or MiB.
func sizeText(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
