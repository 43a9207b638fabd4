package agent

import (
	"bytes"
	"net/http"
	"strconv"
)

// PeerFaultEnv names a fault the agent's peer server injects into every
// snapshot it sends, for end-to-end tests of the receiver's checks: "flip"
// flips a byte in the middle of the body, "cut" closes the connection
// halfway through it. Unset (or anything else) injects nothing.
const PeerFaultEnv = "ROVER_TEST_PEER_FAULT"

// peerFault returns the handler wrapper of fault, or nil.
func peerFault(fault string) func(http.Handler) http.Handler {
	switch fault {
	case "flip", "cut":
	default:
		return nil
	}
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&faultyWriter{ResponseWriter: w, fault: fault}, r)
		})
	}
}

// faultyWriter damages the body once it is past its first half.
type faultyWriter struct {
	http.ResponseWriter
	fault   string
	written int64
	done    bool
}

func (f *faultyWriter) Write(b []byte) (int, error) {
	size, _ := strconv.ParseInt(f.Header().Get("Content-Length"), 10, 64)
	if !f.done && size > 0 && f.written+int64(len(b)) > size/2 {
		f.done = true
		if f.fault == "cut" {
			panic(http.ErrAbortHandler) // the connection closes mid-body
		}
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0x10
	}
	f.written += int64(len(b))
	return f.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (f *faultyWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
