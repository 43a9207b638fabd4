package agent

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strconv"
)

// PeerFaultEnv names a fault the agent's peer server injects into every
// snapshot it sends, for end-to-end tests of the receiver's checks: "flip"
// flips a byte in the middle of the body, "cut" closes the connection
// halfway through it, and "stall" sends the first half and then waits
// until the receiver goes (or the agent is killed), once per job: the
// first agent to stall creates the file PeerStallFileEnv names (it must
// be set), and no agent stalls once it exists. Unset (or anything else)
// injects nothing.
const (
	PeerFaultEnv     = "ROVER_TEST_PEER_FAULT"
	PeerStallFileEnv = "ROVER_TEST_PEER_STALL_FILE"
)

// peerFault returns the handler wrapper of fault, or nil.
func peerFault(fault, stallFile string) func(http.Handler) http.Handler {
	switch fault {
	case "flip", "cut":
	case "stall":
		if stallFile == "" {
			return nil
		}
	default:
		return nil
	}
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&faultyWriter{ResponseWriter: w, fault: fault, stallFile: stallFile, ctx: r.Context()}, r)
		})
	}
}

// faultyWriter damages the body once it is past its first half.
type faultyWriter struct {
	http.ResponseWriter
	fault     string
	stallFile string
	ctx       context.Context // the request's: done when the receiver goes
	written   int64
	done      bool
}

func (f *faultyWriter) Write(b []byte) (int, error) {
	size, _ := strconv.ParseInt(f.Header().Get("Content-Length"), 10, 64)
	if !f.done && size > 0 && f.written+int64(len(b)) > size/2 {
		f.done = true
		switch f.fault {
		case "cut":
			panic(http.ErrAbortHandler) // the connection closes mid-body
		case "stall":
			if f.stall(b[:max(size/2-f.written, 0)]) {
				panic(http.ErrAbortHandler)
			}
		default:
			b = bytes.Clone(b)
			b[len(b)/2] ^= 0x10
		}
	}
	f.written += int64(len(b))
	return f.ResponseWriter.Write(b)
}

// stall sends head, the body's first half, and waits for the receiver to
// go, unless another agent of the job stalled already (false).
func (f *faultyWriter) stall(head []byte) bool {
	mark, err := os.OpenFile(f.stallFile, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false // stalled once already (or no such directory): send it whole
	}
	_, _ = f.ResponseWriter.Write(head)
	http.NewResponseController(f.ResponseWriter).Flush()
	_, _ = mark.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	mark.Close()
	<-f.ctx.Done()
	return true
}

// Unwrap lets http.ResponseController reach the connection.
func (f *faultyWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
