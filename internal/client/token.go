package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/roverml/rover/internal/userfile"
)

// TokenEnv is the environment variable that may hold the job's token.
const TokenEnv = "ROVER_TOKEN"

// MinTokenLen is the shortest token a job may have: a short one can be
// guessed. Tokens Rover makes have 64 characters.
const MinTokenLen = 16

// CheckToken refuses a token shorter than MinTokenLen; from says where it
// came from.
func CheckToken(tok, from string) error {
	if len(tok) < MinTokenLen {
		return fmt.Errorf("the job token from %s has %d characters, fewer than %d: a short token can be guessed; "+
			"let `rover master` make one (name a new --token-file), or use at least %d random characters", from, len(tok), MinTokenLen, MinTokenLen)
	}
	return nil
}

// ErrNoToken is returned by Token when neither a token file nor $ROVER_TOKEN
// gives a token.
var ErrNoToken = errors.New("no job token: pass --token-file PATH (the file `rover master` wrote) or set ROVER_TOKEN")

// Token returns the job's token. A token file the command names (file, from
// --token-file) wins over $ROVER_TOKEN: a command line says what this run
// wants, while a variable may be left over in the environment. Without
// either, it returns ErrNoToken. getenv is os.Getenv outside tests.
func Token(file string, getenv func(string) string) (string, error) {
	if file != "" {
		return ReadToken(file)
	}
	if t := strings.TrimSpace(getenv(TokenEnv)); t != "" {
		return t, CheckToken(t, "$"+TokenEnv)
	}
	return "", ErrNoToken
}

// ReadToken reads the token in the file at path.
func ReadToken(path string) (string, error) {
	b, err := userfile.Read(path)
	if err != nil {
		return "", fmt.Errorf("read the job's token: %w; pass the token file `rover master` wrote", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty; pass the token file `rover master` wrote", path)
	}
	return tok, CheckToken(tok, "token file "+path)
}

// JobToken derives the token of a job run without `rover master` from a
// secret every agent of the job holds and the job's name (--rdzv-id):
// HMAC-SHA256 keyed with the secret over a fixed label and the name, in hex.
// Jobs with the same secret and different names get unrelated tokens, and
// the token, which crosses the network, does not reveal the secret. A
// secret shorter than MinTokenLen is refused: it could be guessed.
func JobToken(secret, job string) (string, error) {
	if len(secret) < MinTokenLen {
		return "", fmt.Errorf("the job secret has %d characters, fewer than %d: a short secret can be guessed; "+
			"use at least %d random characters (e.g. from `openssl rand -hex 32`)", len(secret), MinTokenLen, MinTokenLen)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("rover job token v1\x00" + job))
	return hex.EncodeToString(mac.Sum(nil)), nil
}
