package master

import "github.com/roverml/rover/internal/client"

// compressMinBytes is what the master's clients use (package client), so
// that both ends compress the same messages.
const compressMinBytes = client.CompressMinBytes
