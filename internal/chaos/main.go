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
	quiet := flag.Bool("q", false, "print only the table, not the fault log")
	faults := flag.String("faults", "", "comma-separated fault kinds to pick from (default all: "+strings.Join(AllFaults, ",")+")")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chaos: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg)
	if rep != nil {
		rep.WriteTable(os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(1)
	}
	if rep.Failed() {
		os.Exit(1)
	}
}
