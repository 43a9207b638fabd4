package master

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// splitListener tells the connections of one TCP listener apart by their
// first byte: a TLS handshake record (0x16) goes to its tls listener, anything
// else to its plain one. Each connection's first byte is read in a goroutine
// of its own, with a deadline, so that a client that sends nothing holds up
// no other.
type splitListener struct {
	ln         net.Listener
	tls, plain *connQueue
	// firstByteTimeout bounds the wait for a connection's first byte.
	firstByteTimeout time.Duration
	sniffers         sync.WaitGroup
	mu               sync.Mutex
	waiting          map[net.Conn]struct{} // connections whose first byte is awaited
}

// tlsHandshakeRecord is the first byte of every TLS connection: the record
// type of the ClientHello.
const tlsHandshakeRecord = 0x16

func newSplitListener(ln net.Listener) *splitListener {
	return &splitListener{ln: ln, tls: newConnQueue(ln.Addr()), plain: newConnQueue(ln.Addr()),
		firstByteTimeout: 10 * time.Second, waiting: map[net.Conn]struct{}{}}
}

// run accepts connections until ln is closed, then closes both queues, and
// the connections that have not sent their first byte yet, and waits for
// the connections being told apart.
func (s *splitListener) run() error {
	defer func() {
		s.tls.Close()
		s.plain.Close()
		s.mu.Lock()
		for c := range s.waiting {
			_ = c.SetReadDeadline(time.Now()) // ends its route now
		}
		s.waiting = nil
		s.mu.Unlock()
		s.sniffers.Wait()
	}()
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			// Out of file descriptors and the like: wait and go on, as
			// http.Server does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.sniffers.Go(func() { s.route(c) })
	}
}

// route reads c's first byte and hands c, with that byte put back, to the
// queue it belongs to.
func (s *splitListener) route(c net.Conn) {
	var first [1]byte
	_ = c.SetReadDeadline(time.Now().Add(s.firstByteTimeout))
	s.mu.Lock()
	if s.waiting == nil { // closed
		s.mu.Unlock()
		c.Close()
		return
	}
	s.waiting[c] = struct{}{}
	s.mu.Unlock()
	_, err := io.ReadFull(c, first[:])
	s.mu.Lock()
	delete(s.waiting, c)
	s.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	q := s.plain
	if first[0] == tlsHandshakeRecord {
		q = s.tls
	}
	q.put(&prefixConn{Conn: c, prefix: first[:]})
}

// connQueue is a net.Listener whose connections another goroutine accepted.
type connQueue struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

var _ net.Listener = (*connQueue)(nil)

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// put hands c to Accept, or closes it once the queue is closed.
func (q *connQueue) put(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.closed:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
