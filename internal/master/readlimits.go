package master

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
// the limit, before more of it is read than the limit (see refuseOverLimit).
// TestReadLimits checks that every method has a limit, and
// TestLargestValidRequestsFit that the largest valid requests fit.
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
	roverv1connect.MasterServiceReportNodeCheckProcedure:   80 << 10, // an error text of up to 64 KiB
	// A storage URL of up to 1 KiB, a node id and a number.
	roverv1connect.MasterServiceDeclareCheckpointProcedure: 16 << 10,
	roverv1connect.MasterServiceListEventsProcedure:        smallRequest,
	roverv1connect.MasterServiceWatchEventsProcedure:       smallRequest,
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
		mux.Handle(procedure, refuseOverLimit(procedure, limit, handler(limit)))
	}
	mux.Handle("/"+roverv1connect.MasterServiceName+"/", handler(defaultReadLimit))
	return mux
}

// refuseOverLimit refuses a request over limit without reading the rest of
// it. Connect checks the limit too, but reads (and drops) an oversized
// message to its end before it answers, which costs the master the bytes of
// a message it will not use (gRPC declares up to 4 GiB) and holds its
// connection's receive buffer meanwhile. Here, a Connect unary request that
// declares a length over limit is answered at once, unread; one that does
// not fails at its limit+1st byte; and a message of a stream (gRPC, or
// Connect's streaming protocol) fails as soon as its envelope declares a size
// over limit. Each is ResourceExhausted naming the method and the limit.
func refuseOverLimit(procedure string, limit int, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	method := procedure[strings.LastIndexByte(procedure, '/')+1:]
	tooLarge := func(size string) *connect.Error {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("a %s message is at most %d bytes (%s), this one has %s: the master refuses larger ones", method, limit, sizeText(limit), size))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		switch {
		case ct == "application/json" || ct == "application/proto" || strings.HasPrefix(ct, "application/json;"):
			if r.ContentLength > int64(limit) {
				_ = r.Body.Close()
				_ = errs.Write(w, r, tooLarge(strconv.FormatInt(r.ContentLength, 10)))
				return
			}
			r.Body = &unaryLimit{ReadCloser: r.Body, left: int64(limit), tooLarge: tooLarge}
		case strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+"):
			r.Body = &envelopeLimit{ReadCloser: r.Body, limit: int64(limit), tooLarge: tooLarge}
		}
		next.ServeHTTP(w, r)
	})
}

// unaryLimit fails the read that would take a body past its limit.
type unaryLimit struct {
	io.ReadCloser
	left     int64 // bytes the body may still have
	tooLarge func(size string) *connect.Error
}

func (u *unaryLimit) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	if u.left -= int64(n); u.left < 0 {
		return 0, u.tooLarge("more")
	}
	return n, err
}

// envelopeLimit reads a stream of enveloped messages (a flag byte and a
// 4-byte big-endian size, then the message) and fails the first read after
// an envelope that declares a message over limit.
type envelopeLimit struct {
	io.ReadCloser
	limit    int64
	tooLarge func(size string) *connect.Error
	header   [5]byte
	inHeader int   // bytes of the current envelope's header seen so far
	left     int64 // bytes of the current message still to come
	err      error // set once a message is over the limit
}

func (e *envelopeLimit) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.ReadCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		if e.left > 0 {
			k := min(int64(len(b)), e.left)
			e.left -= k
			b = b[k:]
			continue
		}
		k := copy(e.header[e.inHeader:], b)
		e.inHeader += k
		b = b[k:]
		if e.inHeader == len(e.header) {
			e.inHeader = 0
			e.left = int64(binary.BigEndian.Uint32(e.header[1:]))
			if e.left > e.limit {
				e.err = e.tooLarge(strconv.FormatInt(e.left, 10)) // after the header is handed on
				return n - len(b), nil
			}
		}
	}
	return n, err
}

// sizeText writes a limit (a whole number of KiB) in MiB and KiB.
func sizeText(n int) string {
	mib, kib := n>>20, n%(1<<20)>>10
	switch {
	case mib > 0 && kib > 0:
		return fmt.Sprintf("%d MiB + %d KiB", mib, kib)
	case mib > 0:
		return fmt.Sprintf("%d MiB", mib)
	}
	return fmt.Sprintf("%d KiB", kib)
}
