package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// PushRequest is one backup pushed to a peer.
type PushRequest struct {
	// Addr is the peer's host:port.
	Addr       string
	Run, Token string
	Backup
	// Data is the snapshot's bytes and CRC its CRC32C (as the sender's
	// arena recorded it). Intact, called before the last byte goes, says
	// whether Data still holds the snapshot (nil: always).
	Data   []byte
	CRC    uint32
	Intact func() bool
	// Idle is how long the transfer may make no progress (0: 30 s).
	Idle time.Duration
	// Dial connects to the peer (nil: a TCP dial).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Push sends req.Data to the peer's backup endpoint and returns once the
// peer committed it. It writes the request itself, on the calling
// goroutine (not on an HTTP client's), so that the caller's thread, whose
// priority may be lowered, does the copy. Before the last byte it asks
// req.Intact; when that says the snapshot changed, it cuts the connection
// (the peer commits nothing) and returns ErrChanged. A refusal wraps
// ErrBusy (a push of the same rank in progress there), ErrTooLarge (over
// the peer's budget) or ErrRefused.
func Push(ctx context.Context, req PushRequest) error {
	if err := push(ctx, req); err != nil {
		return fmt.Errorf("push the backup of %s to peer %s: %w", req.Backup, req.Addr, err)
	}
	return nil
}

func push(ctx context.Context, req PushRequest) error {
	for _, v := range []string{req.Run, req.Token, req.From} {
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return errors.New("the run, token and node id must not hold control characters")
		}
	}
	if len(req.Data) == 0 {
		return errors.New("an empty snapshot")
	}
	idle := req.Idle
	if idle <= 0 {
		idle = 30 * time.Second
	}
	dial := req.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: idle}).DialContext
	}
	conn, err := dial(ctx, "tcp", req.Addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	q := url.Values{"step": {strconv.FormatInt(req.Step, 10)}, "rank": {strconv.Itoa(req.Rank)}, "local": {strconv.Itoa(req.Local)}}
	head := fmt.Sprintf("PUT %s?%s HTTP/1.1\r\nHost: %s\r\n%s: %s%s\r\n%s: %s\r\n%s: %s\r\n%s: %d\r\n%s: %08x\r\n"+
		"Content-Length: %d\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
		BackupPath, q.Encode(), req.Addr, authHeader, authScheme, req.Token, HeaderRun, req.Run, HeaderNode, req.From,
		HeaderRound, req.Round, HeaderCRC, req.CRC, len(req.Data))
	br := bufio.NewReader(conn)
	write := func(b []byte) error {
		_ = conn.SetWriteDeadline(time.Now().Add(idle))
		_, err := conn.Write(b)
		return err
	}
	// A peer that refuses answers before it reads the body, and closes:
	// the write fails, and its answer says why.
	refused := func(werr error) error {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		if err := answer(br); err != nil {
			return err
		}
		if c := ctx.Err(); c != nil {
			return c
		}
		return werr
	}
	if err := write([]byte(head)); err != nil {
		return refused(err)
	}
	body := req.Data[:len(req.Data)-1]
	for off := 0; off < len(body); off += writeChunk {
		if err := write(body[off:min(off+writeChunk, len(body))]); err != nil {
			return refused(err)
		}
	}
	if req.Intact != nil && !req.Intact() {
		return ErrChanged // the deferred Close cuts the body short: the peer aborts
	}
	if err := write(req.Data[len(req.Data)-1:]); err != nil {
		return refused(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	if err := answer(br); err != nil {
		return err
	}
	return nil
}

// answer reads the peer's response: nil for a 2xx, else why it refused.
func answer(br *bufio.Reader) error {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	kind := ErrRefused
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		kind = ErrBusy
	case http.StatusRequestEntityTooLarge:
		kind = ErrTooLarge
	}
	return fmt.Errorf("%w: %s: %s", kind, resp.Status, trim(msg))
}
