package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
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
	j := resp.Msg
	state := strings.ToLower(strings.TrimPrefix(j.GetJobState().String(), "JOB_STATE_"))
	fmt.Fprintf(stdout, "job %s: %s", j.GetRunId(), state)
	if j.GetReason() != "" {
		fmt.Fprintf(stdout, " (%s)", j.GetReason())
	}
	phase := "training"
	if j.GetRoundOpen() {
		phase = "collecting nodes"
	}
	fmt.Fprintf(stdout, "\nround %d (%s), world size %d, restarts %d of %d\n\n", j.GetRound(), phase, j.GetWorldSize(), j.GetRestartCount(), j.GetMaxRestarts())
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRANK\tGROUP RANK\tADDR\tSTATE")
	for _, n := range j.GetNodes() {
		st, gr := "alive", "-"
		if n.GetLost() {
			st = "lost: " + n.GetLostReason()
		}
		if n.GetGroupRank() >= 0 {
			gr = fmt.Sprint(n.GetGroupRank())
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", n.GetNodeId(), n.GetNodeRank(), gr, n.GetAddr(), st)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if fs := j.GetFailures(); len(fs) > 0 {
		fmt.Fprintln(stdout, "\nfailures (newest last):")
		for _, f := range fs {
			what := f.GetMessage()
			if what == "" {
				what = fmt.Sprintf("exit code %d", f.GetExitCode())
				if f.GetSignal() != 0 {
					what = fmt.Sprintf("killed by signal %d", f.GetSignal())
				}
			}
			fmt.Fprintf(stdout, "  round %d: node %s (node rank %d), rank %d: %s\n",
				f.GetRound(), f.GetNodeId(), f.GetNodeRank(), f.GetRank(), firstLine(what))
		}
	}
	return nil
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
