package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var cfg Config
	flag.IntVar(&cfg.Cycles, "cycles", 200, "faults to inject")
	flag.IntVar(&cfg.Profiles, "profiles", 3, "Hermes profiles in the temp home (default + named)")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault sequence and delays")
	flag.BoolVar(&cfg.Guard, "guard", true, "run agentd with the guard on (its default); with it off, last-closer faults orphan WALs for the agent to recover")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the temp tree (always kept when the run fails)")
	flag.StringVar(&cfg.Dir, "dir", "", "parent of the temp tree (default $TMPDIR)")
	flag.Float64Var(&cfg.Rate, "rate", 10, "messages per second per writer")
	flag.DurationVar(&cfg.Reconcile, "reconcile", time.Second, "agentd's reconcile interval")
	flag.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "bound on the final wait for incidents and replays")
	flag.Float64Var(&cfg.Pace, "pace", 1, "scale of every random delay (backup age, gaps between cycles, restart delays); 0.4 runs ~2.5x more cycles an hour")
	flag.StringVar(&cfg.AgentLogLevel, "agent-log-level", "info", "agentd's log level (debug: every incident step's duration in the logs)")
	quiet := flag.Bool("q", false, "print only the table, not the fault log")
	faults := flag.String("faults", DefaultPreset, "comma-separated fault kinds and presets to pick from: classic ("+
		strings.Join(ClassicFaults, ",")+"), tools ("+strings.Join(ToolFaults, ",")+"), down ("+strings.Join(DownFaults, ",")+"), handled (classic and tools: the default), all")
	flag.IntVar(&cfg.Containers, "containers", 1, "container writers on the default profile when container-writer is selected")
	flag.BoolVar(&cfg.Goals, "goals", false, "fail the run when issue 18's goals are missed (freeze p99, time to resolution, rolled-back rows replayed back); without it they are printed")
	acceptance := flag.Bool("acceptance", true, "failed incidents and files left in profile directories fail the run (issue 18's acceptance); false prints them only")
	md := flag.Bool("markdown", true, "also print the table in the Markdown format of docs/chaos.md")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chaos: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	kinds, err := ParseFaults(*faults)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: -faults: %v\n", err)
		os.Exit(2)
	}
	cfg.Faults = kinds
	cfg.ReportOnlyAcceptance = !*acceptance
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	// The first SIGINT/SIGTERM ends the cycles and lets the run finish
	// (settle, read the incidents, check the stores: a verdict for the
	// cycles done); a second one aborts.
	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	stopCycles := make(chan struct{})
	cfg.Stop = stopCycles
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Fprintln(os.Stderr, "chaos: interrupted: no more cycles; settling and checking the stores (interrupt again to abort)")
		close(stopCycles)
		<-sigs
		abort()
	}()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		rep.WriteTable(os.Stdout)
		if *md {
			fmt.Println()
			rep.WriteMarkdown(os.Stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(1)
	}
	if rep.Failed() {
		os.Exit(1)
	}
}
