package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobview"
)

// statusConfig is the validated command line of `rover status`.
type statusConfig struct {
	// Master is --master HOST:PORT.
	Master string
	// TokenFile is --token-file; "" for $ROVER_TOKEN.
	TokenFile string
	// TLS is --tls-ca and --tls-server-name; empty for cleartext HTTP/2.
	TLS client.TLS
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseStatusFlags(args, stderr, os.Getenv)
	if err != nil {
		return helpIsNoError(err)
	}
	return showStatus(ctx, c, stdout)
}

// parseStatusFlags parses and checks the command line of `rover status`,
// whose flags default to the variables getenv reads.
func parseStatusFlags(args []string, stderr io.Writer, getenv func(string) string) (*statusConfig, error) {
	c := &statusConfig{}
	fs := flag.NewFlagSet("rover status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.addFlags(fs, getenv)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := c.check("rover status"); err != nil {
		return nil, err
	}
	return c, nil
}

// addFlags adds the flags that find and reach the master, which default
// to the variables getenv reads.
func (c *statusConfig) addFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.Master, "master", getenv("ROVER_MASTER_ADDR"), "the master's HOST:PORT")
	fs.StringVar(&c.TokenFile, "token-file", getenv("ROVER_TOKEN_FILE"), "file holding the job's token; wins over $ROVER_TOKEN")
	fs.StringVar(&c.TLS.CAFile, "tls-ca", getenv("ROVER_TLS_CA"), "speak TLS to the master and verify it with the CA certificates in this PEM file (default $ROVER_TLS_CA; none: cleartext HTTP/2)")
	fs.StringVar(&c.TLS.ServerName, "tls-server-name", getenv("ROVER_TLS_SERVER_NAME"), "with --tls-ca: the name the master's certificate must hold (default $ROVER_TLS_SERVER_NAME, else the host of --master)")
}

// check checks the flags of addFlags, for command.
func (c *statusConfig) check(command string) error {
	if c.Master == "" {
		return usageError{fmt.Errorf("%s needs --master HOST:PORT (or ROVER_MASTER_ADDR)", command)}
	}
	if strings.Contains(c.Master, "://") {
		return usageError{fmt.Errorf("--master=%s: want HOST:PORT, not a URL; for a master that serves TLS, add --tls-ca FILE", c.Master)}
	}
	return nil
}

// client returns a client of the master, and the func that closes its
// connections.
func (c *statusConfig) client() (roverv1connect.MasterServiceClient, func(), error) {
	token, err := client.Token(c.TokenFile, os.Getenv)
	if err != nil {
		return nil, nil, usageError{err}
	}
	hc, err := c.TLS.HTTPClient()
	if err != nil {
		return nil, nil, usageError{err}
	}
	return client.New(hc, c.TLS.URL(c.Master), token), hc.CloseIdleConnections, nil
}

// showStatus asks the master for the job's status and prints it.
func showStatus(ctx context.Context, c *statusConfig, stdout io.Writer) error {
	mc, closeConns, err := c.client()
	if err != nil {
		return err
	}
	defer closeConns()
	resp, err := mc.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
	if err != nil {
		return fmt.Errorf("ask the master at %s: %w", c.Master, err)
	}
	return jobview.Status(stdout, resp.Msg)
}
