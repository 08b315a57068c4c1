package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// row is one store count's figures.
type row struct {
	stores        int
	start         time.Duration
	idleCPU       float64 // % of one core
	rssKB, peakKB int64
	watches       int
	reconcile     []time.Duration
	freeze        []time.Duration // warm writer, from outside
	agentFreeze   []time.Duration // warm writer, holder.frozen latency_ms
	cold          []time.Duration // a writer just started, from outside (-cold)
	missed        int             // trials whose writer was gone before the bench saw it stopped
	env           []string        // the agentd's extra environment (-head-env)
}

// sample is one freeze trial's times, each from just before the rename.
type sample struct {
	swap    time.Duration // the rename and the two unlinks returned
	outside time.Duration // waitid said the writer stopped
	inside  time.Duration // the agent's holder.frozen latency (event to kill)
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

const clockTicks = 100 // USER_HZ on Linux

func measure(o options, b build, n int, writer, dir string) (row, error) {
	r := row{stores: n, env: b.env}
	h, err := buildHome(dir, n, o.dirs)
	if err != nil {
		return r, err
	}
	defer func() {
		if !o.keep {
			os.RemoveAll(dir)
		}
	}()
	t0 := time.Now()
	env := append([]string(nil), b.env...)
	if o.profile != "" {
		pd := filepath.Join(o.profile, fmt.Sprintf("%s-%d", filepath.Base(b.bin), n))
		if err := os.MkdirAll(pd, 0o755); err != nil {
			return r, err
		}
		env = append(env, "STATEGUARD_PROFILE_DIR="+pd)
	}
	a, err := startAgent(b.bin, dir, h.root, o.reconcile, env)
	if err != nil {
		return r, err
	}
	defer a.stop()
	started, _, err := a.wait(0, 10*time.Minute, func(m map[string]any) bool { return m["event"] == "agent.started" })
	if err != nil {
		return r, fmt.Errorf("agent.started: %w", err)
	}
	r.start = started["_seen"].(time.Time).Sub(t0)

	// Idle: after the first reconcile has come and gone.
	time.Sleep(o.reconcile + 2*time.Second)
	mark := a.mark()
	c0, err := cpuTicks(a.pid)
	if err != nil {
		return r, err
	}
	time.Sleep(o.idle)
	c1, err := cpuTicks(a.pid)
	if err != nil {
		return r, err
	}
	r.idleCPU = float64(c1-c0) / clockTicks / o.idle.Seconds() * 100
	r.rssKB, r.peakKB = memKB(a.pid)
	r.watches = inotifyWatches(a.pid)
	for _, m := range a.since(mark) {
		if v, ok := m["took_ms"].(float64); ok {
			r.reconcile = append(r.reconcile, time.Duration(v*float64(time.Millisecond)))
		}
	}
	// A different store each trial: one a trial already used keeps the
	// guard armed on the sidecars its replay left, so a new writer there
	// arms nothing and the trial would wait for a guard.armed that never
	// comes.
	order := rand.Perm(len(h.stores))
	for i, done := 0, 0; done < o.trials+o.cold; i++ {
		db := h.stores[order[i%len(order)]]
		warm := done < o.trials
		sm, err := trial(a, h, writer, db, filepath.Join(dir, fmt.Sprintf("ack-%d", i)), warm)
		if errors.Is(err, errGoneFirst) && r.missed < o.trials {
			r.missed++ // measured nothing: another store
			continue
		}
		if err != nil {
			return r, fmt.Errorf("trial %d on %s: %w", i, db, err)
		}
		done++
		if o.phases {
			fmt.Fprintf(os.Stderr, "benchscale: %d stores, trial %d (%s): rename+unlinks %.2f ms, rename to stopped %.2f ms, agent event to kill %.2f ms\n",
				n, i, map[bool]string{true: "warm", false: "cold"}[warm], msf(sm.swap), msf(sm.outside), msf(sm.inside))
		}
		if warm {
			r.freeze, r.agentFreeze = append(r.freeze, sm.outside), append(r.agentFreeze, sm.inside)
		} else {
			r.cold = append(r.cold, sm.outside)
		}
	}
	return r, nil
}

// trial starts a live writer on db, waits until the agent knows it, renames
// a fresh copy over db, and times the writer's stop.
//
// warm: the agent knows the writer from its holder cache, as it knows any
// writer that has been running for a moment: the check the writer's -shm
// set off has finished its full scan (its generation.changed line comes
// after that scan). That is what the incident fast path (the freeze from
// the cache, on the event's goroutine) is for and what the 5 ms goal is
// about. Not warm (-cold): the rename comes as soon as the guard is armed
// on the writer's -shm, which happens before that check's scan, so the
// agent may still have to find the writer by scanning.
func trial(a *agent, h *home, writer, db, ack string, warm bool) (sm sample, err error) {
	mark := a.mark()
	w, err := hermestest.SpawnWriter(writer, hermestest.WriterOptions{DB: db, Rate: 200, Ack: ack, CheckpointEvery: -1}, 30*time.Second)
	if err != nil {
		return sm, err
	}
	defer func() {
		w.Kill()
		<-w.Done()
	}()
	if _, _, err := a.wait(mark, 30*time.Second, func(m map[string]any) bool {
		return m["event"] == "guard.armed" && m["store"] == db
	}); err != nil {
		return sm, fmt.Errorf("guard on the writer's generation: %w", err)
	}
	if warm {
		if _, _, err := a.wait(mark, 30*time.Second, func(m map[string]any) bool {
			return m["event"] == "generation.changed" && m["store"] == db && nonZeroID(m["shm"])
		}); err != nil {
			return sm, fmt.Errorf("the check that saw the writer's -shm: %w", err)
		}
	}
	mark = a.mark()
	// The fresh copy is written first: the change is the rename.
	tmp, err := h.prepareFresh(db)
	if err != nil {
		return sm, err
	}
	// Told by the kernel (waitid), not polled: a poll loop takes one of
	// the machine's cores from the agent and the writer, whose threads
	// must each run to complete the group stop. The waiting thread is
	// asleep on the writer before the rename.
	st := watchStop(w.Pid)
	t0 := time.Now()
	if err := h.swapIn(tmp, db); err != nil {
		return sm, err
	}
	sm.swap = time.Since(t0)
	var s stopped
	select {
	case s = <-st:
	case <-time.After(10 * time.Second):
		return sm, fmt.Errorf("writer not stopped within 10s of the rename")
	}
	if s.err != nil {
		return sm, s.err
	}
	sm.outside = s.at.Sub(t0)
	fz, _, err := a.wait(mark, 30*time.Second, func(m map[string]any) bool {
		return m["event"] == "holder.frozen" && m["store"] == db
	})
	if err != nil {
		return sm, fmt.Errorf("holder.frozen: %w", err)
	}
	if v, ok := fz["latency_ms"].(float64); ok {
		sm.inside = time.Duration(v * float64(time.Millisecond))
	}
	if _, _, err := a.wait(mark, 60*time.Second, func(m map[string]any) bool {
		return m["event"] == "incident.resolved" && m["store"] == db
	}); err != nil {
		return sm, fmt.Errorf("incident.resolved: %w", err)
	}
	return sm, nil
}

// nonZeroID reports whether a logged fileid.ID (an object, or its
// "dev:ino" text) names a file.
func nonZeroID(v any) bool {
	switch id := v.(type) {
	case map[string]any:
		ino, _ := id["ino"].(float64)
		return ino != 0
	case string:
		return id != "" && id != "0:0"
	}
	return false
}

// ms is the p-th percentile of ds, in milliseconds; "-" for none.
func ms(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return fmt.Sprintf("%.1f ms", float64(s[i].Microseconds())/1000)
}
