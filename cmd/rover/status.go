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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if *addr == "" {
		return usageError{errors.New("rover status needs --master HOST:PORT (or ROVER_MASTER_ADDR)")}
	}
	token, err := client.Token(*tokenFile, os.Getenv)
	if err != nil {
		return usageError{err}
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	resp, err := client.New(hc, *addr, token).GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
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
	return tw.Flush()
}
