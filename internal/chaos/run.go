package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config is one chaos run. Zero fields take the documented defaults.
type Config struct {
	Cycles   int     // default 200
	Profiles int     // default 3: default, p1 (lock-cancelling writer), p2 (tmpfs)
	Seed     uint64  // fault sequence and delays; default 1
	Guard    bool    // agentd's guard setting
	Keep     bool    // keep the temp tree even when the run passes
	Dir      string  // parent of the temp tree; default os.TempDir()
	Rate     float64 // messages per second per writer; default 10
	// Pace scales every random delay (backup age, gaps between cycles,
	// restart delays); default 1. The test runs faster with less.
	Pace float64
	// Settle bounds the final wait for incidents and replay jobs; default
	// 3 minutes (a capture deferred by a full disk retries every 30 s).
	Settle time.Duration
	// Reconcile is agentd's reconcile interval; default 1s (agentd's own
	// default is 10s: a run with it shows what a missed event costs).
	Reconcile time.Duration
	// Faults limits the fault kinds to pick from (nil: AllFaults).
	Faults []string
	// Progress receives the run's log lines as they happen (nil: none);
	// chaos.log in the temp tree always gets them.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Cycles <= 0 {
		c.Cycles = 200
	}
	if c.Profiles <= 0 {
		c.Profiles = 3
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Rate <= 0 {
		c.Rate = 10
	}
	if c.Pace <= 0 {
		c.Pace = 1
	}
	if c.Reconcile <= 0 {
		c.Reconcile = time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Minute
	}
}

// run is the state of one Run.
type run struct {
	cfg   Config
	e     *env
	agent *agentProc
	slots []*writerSlot
	acks  *ackWatch
	log   *slog.Logger
	wg    sync.WaitGroup // background measurements

	rngMu sync.Mutex
	rng   *rand.Rand

	mu  sync.Mutex // guards rep
	rep *Report
	// incidentsAll is every incident, read from the API at the end.
	incidentsAll []apiIncident
}

// Run builds agentd and the writer, runs cfg.Cycles faults against them
// and checks the promise. The error is for a run that could not be set up
// or checked; a run that found data loss returns a Report with Failed().
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	cfg.defaults()
	for _, k := range cfg.Faults {
		if !slices.Contains(AllFaults, k) {
			return nil, fmt.Errorf("unknown fault %q (want some of %s)", k, strings.Join(AllFaults, ", "))
		}
	}
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return nil, fmt.Errorf("sqlite3 CLI not found: %w (hint: apt-get install sqlite3; backups and the last-closer fault use it)", err)
	}
	started := time.Now()
	e, err := newEnv(cfg.Dir, cfg.Profiles)
	r := &run{cfg: cfg, e: e, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		rep: newReport(cfg)}
	defer func() {
		keep := cfg.Keep || err != nil || (rep != nil && rep.Failed())
		if e == nil {
			return
		}
		if cerr := e.cleanup(keep); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if keep && rep != nil {
			rep.Dir = e.root
		}
	}()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(e.logs, "chaos.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open chaos.log: %w", err)
	}
	defer logf.Close()
	var w io.Writer = logf
	if cfg.Progress != nil {
		w = io.MultiWriter(logf, cfg.Progress)
	}
	r.log = slog.New(slog.NewTextHandler(w, nil)).With("subsystem", "chaos")
	r.log.Info("chaos run", "seed", cfg.Seed, "cycles", cfg.Cycles, "profiles", cfg.Profiles, "guard", cfg.Guard, "dir", e.root)
	if e.tmpfsSkip != "" {
		r.rep.Skipped[FaultFullDisk] = e.tmpfsSkip
	}
	if len(cfg.Faults) > 0 {
		for _, k := range AllFaults {
			if !slices.Contains(cfg.Faults, k) {
				r.rep.Skipped[k] = "not selected (-faults)"
			}
		}
	}
	if cfg.Profiles < 2 {
		r.rep.Skipped[FaultLastCloser] = "needs -profiles 2 or more (a profile whose only writer cancels its POSIX locks)"
	}
	if len(r.rep.Skipped) == len(AllFaults) {
		return nil, fmt.Errorf("no fault can run here: %v", r.rep.Skipped)
	}
	if err := e.writeConfig(cfg.Guard, cfg.Reconcile); err != nil {
		return nil, err
	}
	if err := e.build(ctx); err != nil {
		return nil, err
	}
	r.agent = newAgentProc(e, r.log)
	stop := make(chan struct{})
	var writers sync.WaitGroup
	stopped := false
	stopWriters := func() {
		if !stopped {
			stopped = true
			close(stop)
			writers.Wait()
		}
	}
	defer stopWriters()
	if err := r.startWriters(ctx, stop, &writers); err != nil {
		return nil, err
	}
	r.acks = newAckWatch()
	ackStop, ackDone := make(chan struct{}), make(chan struct{})
	var ackFiles []string
	for _, s := range r.slots {
		ackFiles = append(ackFiles, s.opts.Ack)
	}
	go func() { defer close(ackDone); r.acks.run(ackFiles, ackStop) }()
	stopAll := func() {
		stopWriters()
		select {
		case <-ackStop:
		default:
			close(ackStop)
			<-ackDone
		}
	}
	go r.agent.run()
	// finish stops agentd and records how; this only covers the early
	// returns.
	defer func() { _ = r.agent.stop(45 * time.Second) }()
	upCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = r.agent.waitUp(upCtx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("agentd did not come up: %w (see %s)", err, e.logs)
	}

	r.cycles(ctx)
	r.finish(ctx, stopAll)
	r.rep.Duration = time.Since(started)
	return r.rep, ctx.Err()
}

// startWriters starts two writers on the default profile and one on every
// other, and waits until each has committed once.
func (r *run) startWriters(ctx context.Context, stop chan struct{}, wg *sync.WaitGroup) error {
	restart := func() time.Duration { return r.between(200*time.Millisecond, 800*time.Millisecond) }
	n := 0
	for _, p := range r.e.profiles {
		count := 1
		if p.name == "default" {
			count = 2
		}
		for range count {
			n++
			s, err := newWriterSlot(r.e, p, n, r.cfg.Rate, r.log, restart)
			if err != nil {
				return err
			}
			r.slots = append(r.slots, s)
			wg.Add(1)
			go func() { defer wg.Done(); s.loop(stop) }()
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range r.slots {
		for s.pid() == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("writer %s not ready within 60s (see %s)", s.name, r.e.logs)
			}
			if !sleepCtx(ctx, 20*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// cycles injects one random fault per cycle.
func (r *run) cycles(ctx context.Context) {
	for c := 1; c <= r.cfg.Cycles && ctx.Err() == nil; c++ {
		if r.e.tmpfs != nil {
			r.pruneCaptures(ctx, r.e.tmpfs)
		}
		kind, p := r.pick()
		t0 := time.Now()
		msg, err := r.inject(ctx, kind, p)
		r.mu.Lock()
		r.rep.Faults[kind]++
		if err != nil {
			r.rep.FaultErrors++
		}
		r.mu.Unlock()
		name := ""
		if p != nil {
			name = p.name
		}
		if err != nil {
			r.log.Warn("fault failed", "cycle", c, "fault", kind, "profile", name, "err", err)
			if p != nil && strings.Contains(err.Error(), "malformed") && !p.corrupt {
				p.corrupt = true
				r.mu.Lock()
				r.problem("profile %s: its store is malformed since cycle %d at the latest (%v); see chaos.log for the faults before", name, c, err)
				r.mu.Unlock()
			}
		} else {
			r.log.Info("fault", "cycle", c, "fault", kind, "profile", name, "took", time.Since(t0).Round(time.Millisecond), "what", msg)
		}
		sleepCtx(ctx, r.between(300*time.Millisecond, 1500*time.Millisecond))
	}
}

// pick chooses the next fault and its profile. Faults that cannot run on
// this host were listed as skipped; faults that cannot run right now
// (kill-agent while agentd is down, a guarded last-closer with no agent to
// guard) give way to another pick.
func (r *run) pick() (string, *profile) {
	for tries := 0; ; tries++ {
		if tries > 0 && tries%len(AllFaults) == 0 {
			// Only faults that wait for agentd are left: let it start.
			time.Sleep(50 * time.Millisecond)
		}
		kind := AllFaults[r.intn(len(AllFaults))]
		if _, skip := r.rep.Skipped[kind]; skip {
			continue
		}
		switch kind {
		case FaultKillAgent:
			if !r.agent.isUp() {
				continue
			}
			return kind, nil
		case FaultLastCloser:
			if r.cfg.Guard && !r.agent.isUp() {
				continue
			}
			return kind, r.e.profiles[1]
		case FaultFullDisk:
			// With agentd down nothing can act: the writer fails on
			// the full disk, exits, and its close checkpoints whatever
			// generation it holds. That measures the absence of the
			// agent, not the agent.
			if !r.agent.isUp() {
				continue
			}
			return kind, r.e.tmpfs
		}
		return kind, r.e.profiles[r.intn(len(r.e.profiles))]
	}
}

// writerPids lists the running writers of p.
func (r *run) writerPids(p *profile) []int {
	var pids []int
	for _, s := range r.slots {
		if s.p == p {
			if pid := s.pid(); pid != 0 {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) coin() bool { return r.intn(2) == 0 }

func (r *run) between(lo, hi time.Duration) time.Duration {
	return between(r.rng, &r.rngMu, lo, hi, r.cfg.Pace)
}

func (r *run) scale(d time.Duration) time.Duration { return time.Duration(float64(d) * r.cfg.Pace) }

// problem records something a reader of the report must look at; callers
// hold r.mu or call it before concurrency starts.
func (r *run) problem(format string, args ...any) {
	r.rep.Problems = append(r.rep.Problems, fmt.Sprintf(format, args...))
}

// sleepCtx sleeps d and reports whether ctx is still alive.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
