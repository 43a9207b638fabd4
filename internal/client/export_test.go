package client

import "time"

// ShortenDeadlines sets the handshake and first-answer deadlines to d until
// the returned function restores them.
func ShortenDeadlines(d time.Duration) (restore func()) {
	h, f := handshakeTimeout, firstAnswerTimeout
	handshakeTimeout, firstAnswerTimeout = d, d
	return func() { handshakeTimeout, firstAnswerTimeout = h, f }
}
