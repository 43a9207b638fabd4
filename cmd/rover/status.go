package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobview"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rover status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("master", os.Getenv("ROVER_MASTER_ADDR"), "the master's HOST:PORT")
	tokenFile := fs.String("token-file", os.Getenv("ROVER_TOKEN_FILE"), "file holding the job's token; wins over $ROVER_TOKEN")
	var via client.TLS
	fs.StringVar(&via.CAFile, "tls-ca", os.Getenv("ROVER_TLS_CA"), "speak TLS to the master and verify it with the CA certificates in this PEM file (default $ROVER_TLS_CA; none: cleartext HTTP/2)")
	fs.StringVar(&via.ServerName, "tls-server-name", os.Getenv("ROVER_TLS_SERVER_NAME"), "with --tls-ca: the name the master's certificate must hold (default $ROVER_TLS_SERVER_NAME, else the host of --master)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if *addr == "" {
		return usageError{errors.New("rover status needs --master HOST:PORT (or ROVER_MASTER_ADDR)")}
	}
	if strings.Contains(*addr, "://") {
		return usageError{fmt.Errorf("--master=%s: want HOST:PORT, not a URL; for a master that serves TLS, add --tls-ca FILE", *addr)}
	}
	token, err := client.Token(*tokenFile, os.Getenv)
	if err != nil {
		return usageError{err}
	}
	hc, err := via.HTTPClient()
	if err != nil {
		return usageError{err}
	}
	defer hc.CloseIdleConnections()
	resp, err := client.New(hc, via.URL(*addr), token).GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		return fmt.Errorf("ask the master at %s: %w", *addr, err)
	}
	return jobview.Status(stdout, resp.Msg)
}
