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
	// AgentLogLevel is agentd's log level; default info. debug adds
	// each incident step's duration, for finding what holds a worker.
	AgentLogLevel string
	// Faults are the fault kinds to pick from (nil: DefaultPreset's).
	Faults []string
	// Containers is how many container writers (own mount and pid
	// namespaces) the default profile gets when container-writer is
	// among Faults; default 1.
	Containers int
	// ReportOnlyAcceptance prints issue 18's acceptance checks that
	// today's agentd still fails for known reasons (failed incidents,
	// files left in profile directories) without failing the run: for CI
	// until the incident engine's fixes land. Zero: they fail the run.
	ReportOnlyAcceptance bool
	// Goals makes issue 18's goals (freeze p99, time to resolution,
	// rolled-back rows replayed back) fail the run when missed; without
	// it they are printed with met or MISSED. A shared machine's timings
	// swing, so CI leaves it off; the long acceptance runs set it.
	Goals bool
	// Progress receives the run's log lines as they happen (nil: none);
	// chaos.log in the temp tree always gets them.
	Progress io.Writer
	// Stop, when closed, ends the cycles after the one running (the first
	// SIGINT): the run then settles, reads agentd's incidents and checks
	// every store as after its last cycle, so an interrupted run still
	// has a verdict. Cancelling Run's context aborts even that.
	Stop <-chan struct{}
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
	if c.Containers <= 0 {
		c.Containers = 1
	}
	if len(c.Faults) == 0 {
		c.Faults = Presets[DefaultPreset]
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
	// kinds are the selected faults that can run here; firstRound the
	// ones not injected yet, so every kind comes up once before the
	// choice turns random (pick).
	kinds      []string
	firstRound []string

	mu  sync.Mutex // guards rep
	rep *Report
	// incidentsAll is every incident, read from the API at the end.
	incidentsAll []apiIncident
	// incidentsRead is whether that read succeeded (judgeFor).
	incidentsRead bool
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
	cfg.Faults = slices.Clone(cfg.Faults)
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
	r.log = runLogger(logf, cfg.Progress)
	r.log.Info("chaos run", "seed", cfg.Seed, "cycles", cfg.Cycles, "profiles", cfg.Profiles, "guard", cfg.Guard, "dir", e.root)
	if err := r.selectFaults(ctx); err != nil {
		return nil, err
	}
	if err := e.writeConfig(cfg.Guard, cfg.Reconcile, cfg.AgentLogLevel); err != nil {
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
	stopAcks := r.watchAcks()
	stopAll := func() {
		stopWriters()
		stopAcks()
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
	if closed(cfg.Stop) {
		r.log.Warn("interrupted: cycles ended early; settling and checking as after the last cycle")
	}
	r.finish(ctx, stopAll)
	r.rep.Duration = time.Since(started)
	return r.rep, ctx.Err()
}

// runLogger logs to chaos.log and, when set, to progress.
func runLogger(logf io.Writer, progress io.Writer) *slog.Logger {
	w := logf
	if progress != nil {
		w = io.MultiWriter(logf, progress)
	}
	return slog.New(slog.NewTextHandler(w, nil)).With("subsystem", "chaos")
}

// watchAcks tails every writer's ack file until the returned func is
// called (once or more), which reads them a last time.
func (r *run) watchAcks() func() {
	r.acks = newAckWatch()
	stop, done := make(chan struct{}), make(chan struct{})
	var files []string
	for _, s := range r.slots {
		files = append(files, s.opts.Ack)
	}
	go func() { defer close(done); r.acks.run(files, stop) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
		})
	}
}

// selectFaults decides which selected faults can run here (the others are
// listed as skipped, with why) and the order of the first round.
func (r *run) selectFaults(ctx context.Context) error {
	skip := map[string]string{}
	if r.e.tmpfsSkip != "" {
		skip[FaultFullDisk] = r.e.tmpfsSkip
	}
	if r.cfg.Profiles < 2 {
		skip[FaultLastCloser] = "needs -profiles 2 or more (a profile whose only writer cancels its POSIX locks)"
	}
	for _, k := range ToolFaults {
		if bin := toolNeeds(k); bin != "" {
			if _, err := exec.LookPath(bin); err != nil {
				skip[k] = bin + " not installed (.ci/run installs it)"
			}
		}
	}
	if slices.Contains(r.cfg.Faults, FaultContainer) {
		if why := probeContainers(ctx); why != "" {
			skip[FaultContainer] = why
		}
	}
	r.rep.Selected = r.cfg.Faults
	for _, k := range r.cfg.Faults {
		if why, ok := skip[k]; ok {
			r.rep.Skipped[k] = why
			continue
		}
		r.kinds = append(r.kinds, k)
	}
	if len(r.kinds) == 0 {
		return fmt.Errorf("no fault can run here: %v", r.rep.Skipped)
	}
	r.firstRound = slices.Clone(r.kinds)
	r.rngMu.Lock()
	r.rng.Shuffle(len(r.firstRound), func(i, j int) { r.firstRound[i], r.firstRound[j] = r.firstRound[j], r.firstRound[i] })
	r.rngMu.Unlock()
	return nil
}

// startWriters starts two writers on the default profile and one on every
// other, plus the container writers on the default profile when the
// container-writer fault runs, and waits until each has committed once.
func (r *run) startWriters(ctx context.Context, stop chan struct{}, wg *sync.WaitGroup) error {
	restart := func() time.Duration { return r.between(200*time.Millisecond, 800*time.Millisecond) }
	n := 0
	add := func(s *writerSlot, err error) error {
		if err != nil {
			return err
		}
		r.slots = append(r.slots, s)
		wg.Add(1)
		go func() { defer wg.Done(); s.loop(stop) }()
		return nil
	}
	for _, p := range r.e.profiles {
		count := 1
		if p.name == "default" {
			count = 2
		}
		for range count {
			n++
			if err := add(newWriterSlot(r.e, p, n, r.cfg.Rate, r.log, restart)); err != nil {
				return err
			}
		}
	}
	if slices.Contains(r.kinds, FaultContainer) {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			return err
		}
		for range r.cfg.Containers {
			n++
			if err := add(newContainerSlot(r.e, r.containerProfile(), n, r.cfg.Rate, r.log, restart, unshare)); err != nil {
				return err
			}
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
	for c := 1; c <= r.cfg.Cycles && ctx.Err() == nil && !closed(r.cfg.Stop); c++ {
		if r.e.tmpfs != nil {
			r.pruneCaptures(ctx, r.e.tmpfs)
		}
		for _, p := range r.e.profiles {
			r.pruneOperatorFiles(ctx, p)
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

// closed reports whether c is closed; a nil c never is.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pick chooses the next fault and its profile: every kind once, in an
// order the seed shuffled, then at random, so even a short run injects
// every kind. Faults that cannot run right now (kill-agent while agentd is
// down, a guarded last-closer with no agent to guard, an in-place rewrite
// or a mv aside with no agent to see it) give way to another.
func (r *run) pick() (string, *profile) {
	for tries := 0; ; tries++ {
		if tries > 0 && tries%len(r.kinds) == 0 {
			// Only faults that wait for agentd are left: let it start.
			time.Sleep(50 * time.Millisecond)
		}
		var kind string
		if len(r.firstRound) > 0 {
			kind = r.firstRound[tries%len(r.firstRound)]
		} else {
			kind = r.kinds[r.intn(len(r.kinds))]
		}
		p, ok := r.target(kind)
		if !ok {
			continue
		}
		if i := slices.Index(r.firstRound, kind); i >= 0 {
			r.firstRound = slices.Delete(r.firstRound, i, i+1)
		}
		return kind, p
	}
}

// target is the profile kind runs on, and whether it can run now.
func (r *run) target(kind string) (*profile, bool) {
	switch kind {
	case FaultKillAgent:
		return nil, r.agent.isUp()
	case FaultLastCloser:
		return r.e.profiles[1], !r.cfg.Guard || r.agent.isUp()
	case FaultFullDisk:
		// With agentd down nothing can act: the writer fails on
		// the full disk, exits, and its close checkpoints whatever
		// generation it holds. That measures the absence of the
		// agent, not the agent.
		return r.e.tmpfs, r.agent.isUp()
	case FaultContainer:
		return r.containerProfile(), true
	case FaultCpInplace, FaultRsyncInplace, FaultCpRmSidecars, FaultMvAsideCopy:
		// With agentd down (or still starting: it answers its socket
		// after every store's first check) these rewrite what live
		// writers hold where no later look can tell: the same inode
		// rewritten under their WAL, or (mv aside) their main renamed
		// to a name that is no role of the store, so a starting agent
		// sees a writer of the new main's -wal, not an orphan. The
		// writers' next checkpoint writes their frames into the copy.
		// That measures the absence of the agent (seed 3 of a long chaos run:
		// a mv-aside-copy 100 ms before agentd came up left p1
		// malformed from cycle 192; seed 1: a cp-inplace while a
		// restarted agent resumed incidents, the default store).
		return r.e.profiles[r.intn(len(r.e.profiles))], r.agent.isUp()
	case FaultCpInplaceDown, FaultRsyncInplaceDown, FaultMvAsideCopyDown:
		// They stop agentd themselves: from an agent that is up.
		return r.e.profiles[r.intn(len(r.e.profiles))], r.agent.isUp()
	}
	return r.e.profiles[r.intn(len(r.e.profiles))], true
}

// containerProfile is the profile whose writers include the container
// writers: the default one, next to its two host writers, so an incident
// has holders the agent can see and one it may not.
func (r *run) containerProfile() *profile { return r.e.profiles[0] }

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
