package master

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/userfile"
)

// requireToken answers every request that does not carry the job's token
// with Unauthenticated, in the protocol the client speaks, before anything
// reads its body: an unauthenticated client costs the master its headers, not
// the megabytes it sends. (The client side, which adds the token, is package
// client's.)
func requireToken(token string, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get(client.AuthHeader), client.AuthScheme)
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			// Closing the body unread makes the server reset an HTTP/2
			// stream, and not drain an HTTP/1 body, rather than read it.
			_ = r.Body.Close()
			_ = errs.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errUnauthenticated))
			return
		}
		next.ServeHTTP(w, r)
	})
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
	b, err := userfile.Read(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty: delete it to have a new token made, or write the job's token into it", path)
		}
		return tok, client.CheckToken(tok, "token file "+path)
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
