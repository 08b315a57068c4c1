package main

import (
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
	freeze        []time.Duration // from outside
	agentFreeze   []time.Duration // holder.frozen latency_ms
}

const clockTicks = 100 // USER_HZ on Linux

func measure(o options, b build, n int, writer, dir string) (row, error) {
	r := row{stores: n}
	h, err := buildHome(dir, n)
	if err != nil {
		return r, err
	}
	defer func() {
		if !o.keep {
			os.RemoveAll(dir)
		}
	}()
	t0 := time.Now()
	a, err := startAgent(b.bin, dir, h.root, o.reconcile)
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
	for i := range o.trials {
		db := h.stores[order[i%len(order)]]
		out, in, err := trial(a, h, writer, db, filepath.Join(dir, fmt.Sprintf("ack-%d", i)))
		if err != nil {
			return r, fmt.Errorf("trial %d on %s: %w", i, db, err)
		}
		r.freeze, r.agentFreeze = append(r.freeze, out), append(r.agentFreeze, in)
	}
	return r, nil
}

// trial starts a live writer on db, waits until the agent has armed the
// guard on the generation the writer made (so its scan knows the
// writer), renames a fresh copy over db, and times the writer's stop.
func trial(a *agent, h *home, writer, db, ack string) (outside, inside time.Duration, err error) {
	mark := a.mark()
	w, err := hermestest.SpawnWriter(writer, hermestest.WriterOptions{DB: db, Rate: 200, Ack: ack, CheckpointEvery: -1}, 30*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		w.Kill()
		<-w.Done()
	}()
	if _, _, err := a.wait(mark, 30*time.Second, func(m map[string]any) bool {
		return m["event"] == "guard.armed" && m["store"] == db
	}); err != nil {
		return 0, 0, fmt.Errorf("guard on the writer's generation: %w", err)
	}
	mark = a.mark()
	t0 := time.Now()
	if err := h.renameFreshOver(db); err != nil {
		return 0, 0, err
	}
	for procState(w.Pid) != 'T' {
		if time.Since(t0) > 10*time.Second {
			return 0, 0, fmt.Errorf("writer not stopped within 10 s of the rename")
		}
	}
	outside = time.Since(t0)
	fz, _, err := a.wait(mark, 30*time.Second, func(m map[string]any) bool {
		return m["event"] == "holder.frozen" && m["store"] == db
	})
	if err != nil {
		return 0, 0, fmt.Errorf("holder.frozen: %w", err)
	}
	if v, ok := fz["latency_ms"].(float64); ok {
		inside = time.Duration(v * float64(time.Millisecond))
	}
	if _, _, err := a.wait(mark, 60*time.Second, func(m map[string]any) bool {
		return m["event"] == "incident.resolved" && m["store"] == db
	}); err != nil {
		return 0, 0, fmt.Errorf("incident.resolved: %w", err)
	}
	return outside, inside, nil
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
