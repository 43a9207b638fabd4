// Command fakeworker is a stand-in training process for Rover's integration
// tests: it runs for a while (or until a file appears), then exits with a
// chosen code, optionally ignoring SIGTERM, hanging, failing only in early
// restarts, and dumping its environment so tests can check torchrun's
// contract.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	runTime := flag.Duration("run-time", 100*time.Millisecond, "how long to run before exiting")
	restartedRunTime := flag.Duration("restarted-run-time", -1, "run time when TORCHELASTIC_RESTART_COUNT > 0; -1 = --run-time")
	failAfter := flag.Duration("fail-after", -1, "run time of a worker that will fail; -1 = --run-time")
	exitCode := flag.Int("exit-code", 0, "exit code at the end")
	failRank := flag.Int("fail-rank", -1, "only this RANK exits with --exit-code (others exit 0); -1 = every rank")
	failUntilRestart := flag.Int("fail-until-restart", -1, "exit with --exit-code only while TORCHELASTIC_RESTART_COUNT is below this; -1 = always")
	failOnceMarker := flag.String("fail-once-marker", "", "exit with --exit-code only if this file does not exist yet (it is created)")
	ignoreTerm := flag.Bool("ignore-sigterm", false, "ignore SIGTERM")
	hang := flag.Bool("hang", false, "never exit by itself")
	runUntil := flag.String("run-until", "", "run until this file exists (instead of --run-time), then exit with --exit-code")
	envDir := flag.String("env-dir", "", "write the environment as JSON to DIR/env-r<RESTART>-<ROUND>-rank<RANK>.json")
	errorMessage := flag.String("error-message", "", "write a torch-style error file (TORCHELASTIC_ERROR_FILE) with this message before failing")
	signalDir := flag.String("signal-dir", "", "on SIGINT, SIGTERM, SIGHUP or SIGQUIT, write the signal's name to DIR/signal-rank<RANK> and exit 0")
	say := flag.String("say", "", "write this to stdout, verbatim, after the started line")
	sayStderr := flag.String("say-stderr", "", "write this to stderr, verbatim, after the started line")
	flag.Parse()

	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	rank := os.Getenv("RANK")
	if *signalDir != "" {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		go func() {
			s := <-ch
			_ = os.WriteFile(filepath.Join(*signalDir, "signal-rank"+rank), []byte(s.String()), 0o644)
			os.Exit(0)
		}()
	}
	restart, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	if *envDir != "" {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		env["PID"] = strconv.Itoa(os.Getpid())
		b, _ := json.MarshalIndent(env, "", " ")
		name := fmt.Sprintf("env-r%d-%s-rank%s.json", restart, os.Getenv("ROVER_ROUND"), rank)
		tmp := filepath.Join(*envDir, "."+name)
		err := os.WriteFile(tmp, b, 0o644)
		if err == nil {
			err = os.Rename(tmp, filepath.Join(*envDir, name))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakeworker:", err)
			os.Exit(70)
		}
	}
	fmt.Printf("fakeworker rank %s restart %d started\n", rank, restart)
	if *say != "" {
		os.Stdout.WriteString(*say)
	}
	if *sayStderr != "" {
		os.Stderr.WriteString(*sayStderr)
	}
	if *hang {
		for {
			time.Sleep(time.Hour)
		}
	}
	code := *exitCode
	if *failRank >= 0 && rank != strconv.Itoa(*failRank) {
		code = 0
	}
	if *failUntilRestart >= 0 && restart >= *failUntilRestart {
		code = 0
	}
	if *failOnceMarker != "" {
		if _, err := os.Stat(*failOnceMarker); err == nil {
			code = 0
		}
	}
	d := *runTime
	if restart > 0 && *restartedRunTime >= 0 {
		d = *restartedRunTime
	}
	if code != 0 && *failAfter >= 0 {
		d = *failAfter
	}
	if *runUntil != "" {
		for {
			if _, err := os.Stat(*runUntil); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	} else {
		time.Sleep(d)
	}
	if code != 0 && *failOnceMarker != "" {
		f, err := os.OpenFile(*failOnceMarker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			code = 0 // another worker (or an earlier run) failed already
		} else {
			f.Close()
		}
	}
	if code != 0 {
		if *errorMessage != "" {
			writeErrorFile(*errorMessage)
		}
		fmt.Fprintf(os.Stderr, "fakeworker rank %s failing with exit code %d\n", rank, code)
	}
	os.Exit(code)
}

func writeErrorFile(msg string) {
	path := os.Getenv("TORCHELASTIC_ERROR_FILE")
	if path == "" {
		return
	}
	rec := map[string]any{"message": map[string]any{
		"message": msg,
		"extraInfo": map[string]string{
			"py_callstack": "Traceback (most recent call last):\n  File \"fake.py\", line 1\n" + msg,
			"timestamp":    strconv.FormatInt(time.Now().Unix(), 10),
		},
	}}
	b, _ := json.Marshal(rec)
	_ = os.WriteFile(path, b, 0o644)
}
