package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Deadlines of every client of a master, on each new connection: the TCP
// connect, the TLS handshake, and the server's first bytes (what an HTTP/2
// server sends at once: its SETTINGS). A port that accepts and never
// answers fails the call within them instead of hanging it; once a
// connection is up, HTTP/2 pings (newTransport) notice a master that went
// silent.
const (
	DialTimeout        = 5 * time.Second
	HandshakeTimeout   = 10 * time.Second
	FirstAnswerTimeout = 10 * time.Second
)

// The deadlines in force; tests shorten them.
var (
	handshakeTimeout   = HandshakeTimeout
	firstAnswerTimeout = FirstAnswerTimeout
)

// NoAnswerError is a server that accepted a connection and sent nothing
// (no TLS handshake, no HTTP/2 settings) within its deadline. It wraps
// os.ErrDeadlineExceeded; calls that retry while a master is unreachable
// retry it.
type NoAnswerError struct {
	Addr string
	What string // "the TLS handshake", "its first bytes"
	Wait time.Duration
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("%s accepted the connection but %s did not come within %s: no Rover master answers there; "+
		"check the address and port, and that the master's TLS (--tls-cert) and the client's (--tls-ca) agree", e.Addr, e.What, e.Wait)
}

func (e *NoAnswerError) Unwrap() error { return os.ErrDeadlineExceeded }

// NotMasterError is a server that answered, but not as a Rover master does:
// another try cannot fix it.
type NotMasterError struct {
	Addr  string
	Found string // what answers there
}

func (e *NotMasterError) Error() string {
	return fmt.Sprintf("%s answers %s, not a Rover master: check the address and port (rover run: --rdzv-endpoint; rover status: --master)", e.Addr, e.Found)
}

// plainHTTP is what a plain HTTP/1.x server answers.
const plainHTTP = "plain HTTP/1.x"

// answerConn is a new connection to a master whose first read must come
// within wait. When sniff is set, a first answer in HTTP/1.x (a plain web
// server's "HTTP/1.1 400 Bad Request" to HTTP/2's preface) fails the read
// with a *NotMasterError, instead of the HTTP/2 client's "frame too large".
type answerConn struct {
	net.Conn
	addr  string
	what  string
	wait  time.Duration
	sniff bool
	read  bool // the first bytes came; only the connection's reader sets it
	// diag, when set, keeps the error of a failed first read for the
	// call that used the connection (diagnosingTransport).
	diag *diagnosis

	// With sniff, what a failed write needs to know of the first read
	// (answerAfterWriteFailed): reading says one began; firstDone is
	// closed when it ended, firstErr set before.
	reading   atomic.Bool
	firstDone chan struct{}
	firstOnce sync.Once
	firstErr  error
}

func (c *answerConn) Read(p []byte) (int, error) {
	if c.read {
		return c.Conn.Read(p)
	}
	n, err := c.firstRead(p)
	if n > 0 || err != nil {
		c.endFirstRead(err)
	}
	return n, err
}

// endFirstRead records the first read's outcome for a failed write.
func (c *answerConn) endFirstRead(err error) {
	if c.firstDone == nil {
		return
	}
	c.firstOnce.Do(func() {
		c.firstErr = err
		close(c.firstDone)
	})
}

// firstRead reads the connection's first bytes within c.wait, sniffing
// them for HTTP/1.x.
func (c *answerConn) firstRead(p []byte) (int, error) {
	c.reading.Store(true)
	if c.wait > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.wait))
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read = true
		if c.wait > 0 {
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
		if c.sniff && bytes.HasPrefix(p[:n], []byte("HTTP/")) {
			return 0, c.diag.keep(c.addr, &NotMasterError{Addr: c.addr, Found: plainHTTP})
		}
		c.diag.keep(c.addr, nil)
	}
	if err != nil && c.wait > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, c.diag.keep(c.addr, &NoAnswerError{Addr: c.addr, What: c.what, Wait: c.wait})
	}
	return n, err
}

// Write writes p; a write that fails before the server's first answer was
// read (with sniff) returns that answer's *NotMasterError, if it is one.
func (c *answerConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && c.sniff {
		if cause := c.answerAfterWriteFailed(); cause != nil {
			return n, cause
		}
	}
	return n, err
}

// answerAfterWriteFailed returns the *NotMasterError the server's first
// answer shows, or nil. A plain web server answers HTTP/2's preface at once
// and closes the connection, so the client's next write can fail (broken
// pipe, reset) before its reader looked at that answer, which still waits
// in the socket: the reader's verdict is awaited when a read began, or the
// answer read here when none did (the HTTP/2 client starts reading only
// once its preface is written).
func (c *answerConn) answerAfterWriteFailed() error {
	if !c.reading.Load() {
		head := make([]byte, len("HTTP/"))
		_ = c.Conn.SetReadDeadline(time.Now().Add(max(c.wait, time.Second)))
		n, _ := io.ReadFull(c.Conn, head)
		if bytes.HasPrefix(head[:n], []byte("HTTP/")) {
			err := c.diag.keep(c.addr, &NotMasterError{Addr: c.addr, Found: plainHTTP})
			c.endFirstRead(err)
			return err
		}
		return nil
	}
	timer := time.NewTimer(max(c.wait, time.Second))
	defer timer.Stop()
	select {
	case <-c.firstDone:
	case <-timer.C:
		return nil
	}
	if nm := (*NotMasterError)(nil); errors.As(c.firstErr, &nm) {
		return c.firstErr
	}
	return nil
}

// diagnosis keeps, per address, why the newest connection's first read
// failed. The HTTP/2 client reports a connection that failed before its
// settings arrived as "client conn could not be established", without the
// cause; diagnosingTransport gives the call the cause instead.
type diagnosis struct {
	mu   sync.Mutex
	errs map[string]error
}

// keep records err (nil: the address answered) and returns it.
func (d *diagnosis) keep(addr string, err error) error {
	if d == nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.errs, addr)
		return nil
	}
	if d.errs == nil {
		d.errs = map[string]error{}
	}
	d.errs[addr] = err
	return err
}

func (d *diagnosis) get(addr string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.errs[addr]
}

// diagnosingTransport is the transport of every client of a master: a
// failed call to an address whose newest connection failed its first read
// returns that read's error (a *NotMasterError, a *NoAnswerError), joined
// with the transport's own.
type diagnosingTransport struct {
	base *http.Transport
	diag *diagnosis
}

func (t *diagnosingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		if cause := t.diag.get(req.URL.Host); cause != nil && !errors.Is(err, cause) {
			return nil, fmt.Errorf("%w (%v)", cause, err)
		}
	}
	return resp, err
}

// CloseIdleConnections closes the base transport's idle connections.
func (t *diagnosingTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// dialMaster opens a TCP connection to a master at addr whose first answer
// must come within wait (0: no deadline on it).
func dialMaster(ctx context.Context, network, addr string, wait time.Duration, sniff bool, what string, diag *diagnosis) (*answerConn, error) {
	d := &net.Dialer{Timeout: DialTimeout, KeepAlive: 15 * time.Second}
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &answerConn{Conn: raw, addr: addr, what: what, wait: wait, sniff: sniff, read: wait == 0 && !sniff, diag: diag}
	if sniff {
		c.firstDone = make(chan struct{})
	}
	return c, nil
}

// h2Preface is what an HTTP/2 client sends first: the connection preface
// and an empty SETTINGS frame.
var h2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// probeCleartext says what answers at addr in cleartext, after a TLS
// handshake was answered in cleartext: a server of HTTP/2 without TLS (what
// `rover master` without --tls-cert serves) answers HTTP/2's preface with a
// SETTINGS frame; a plain web server answers HTTP/1.x. It returns
// plainHTTP, "h2c", or "" when it cannot tell.
func probeCleartext(ctx context.Context, addr string) string {
	c, err := dialMaster(ctx, "tcp", addr, firstAnswerTimeout, false, "its first bytes", nil)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(firstAnswerTimeout))
	if _, err := c.Write(h2Preface); err != nil {
		return ""
	}
	head := make([]byte, 9)
	n, _ := c.Read(head)
	switch {
	case bytes.HasPrefix(head[:n], []byte("HTTP/")):
		return plainHTTP
	case n >= 4 && head[3] == 4: // a frame header of type SETTINGS
		return "h2c"
	}
	return ""
}
