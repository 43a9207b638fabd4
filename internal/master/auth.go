package master

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/client"
)

// tokenInterceptor rejects requests that do not carry the job's token (the
// client side, which adds it, is package client's).
type tokenInterceptor struct{ token string }

var _ connect.Interceptor = tokenInterceptor{}

func (t tokenInterceptor) check(h interface{ Get(string) string }) error {
	got, ok := strings.CutPrefix(h.Get(client.AuthHeader), client.AuthScheme)
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(t.token)) != 1 {
		return connect.NewError(connect.CodeUnauthenticated, errUnauthenticated)
	}
	return nil
}

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := t.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient is never called: the interceptor is a server's.
func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := t.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// NewToken returns a fresh random job token.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err)) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// LoadOrCreateToken reads the token in path, or writes a new one there (mode
// 0600, so only the job's user can read it) when the file does not exist.
func LoadOrCreateToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty: delete it to have a new token made, or write the job's token into it", path)
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := NewToken()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create token file directory: %w", err)
	}
	// Write a temporary file and link it into place, so that a concurrent
	// reader never sees a half-written token.
	f, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return "", fmt.Errorf("create token file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("write token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write token file: %w", err)
	}
	if err := os.Link(f.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) { // another process made it first
			return client.ReadToken(path)
		}
		return "", fmt.Errorf("create token file: %w", err)
	}
	return tok, nil
}
