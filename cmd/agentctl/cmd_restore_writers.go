package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
)

// frozenWriters are the processes restore --stop-writers freezes: the
// recovery.Writers of the restore, and then released by policy.
type frozenWriters struct {
	target string
	rule   holders.Rule
	skip   int // agentd's pid: never signalled
	out    io.Writer
	scan   func(path string, rule holders.Rule) (*holders.StoreResult, error)

	procs     map[int]holders.Process
	rescanned bool
	stopped   bool
}

func (w *frozenWriters) add(p holders.Process) {
	if w.procs == nil {
		w.procs = map[int]holders.Process{}
	}
	w.procs[p.Pid] = p
}

func (w *frozenWriters) refs() []holders.ProcRef {
	refs := make([]holders.ProcRef, 0, len(w.procs))
	for _, p := range w.procs {
		refs = append(refs, p.Ref())
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Pid < refs[j].Pid })
	return refs
}

// stopWait bounds the wait for SIGSTOP to take effect.
const stopWait = 5 * time.Second

// Stop freezes every writer and waits until each is stopped. The first
// time, it scans again once they are frozen and freezes any process that
// opened the store in between.
func (w *frozenWriters) Stop(ctx context.Context) error {
	if err := w.freezeAll(ctx); err != nil {
		return err
	}
	if !w.rescanned {
		w.rescanned = true
		sr, err := w.scan(w.target, w.rule)
		if err != nil {
			return fmt.Errorf("re-scan after freezing: %w", err)
		}
		added := 0
		for _, p := range sr.Holders {
			if _, ok := w.procs[p.Pid]; !ok && p.Pid != w.skip {
				w.add(p)
				added++
			}
		}
		if added > 0 {
			fmt.Fprintf(w.out, "%d more process(es) opened the store meanwhile; freezing them too\n", added)
			return w.freezeAll(ctx)
		}
	}
	return nil
}

func (w *frozenWriters) freezeAll(ctx context.Context) error {
	refs := w.refs()
	for _, ref := range refs {
		if err := holders.Freeze(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
			_ = w.Resume(ctx)
			return fmt.Errorf("freeze pid %d: %w", ref.Pid, err)
		}
	}
	w.stopped = true
	wctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	for _, ref := range refs {
		if err := holders.WaitStopped(wctx, ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
			_ = w.Resume(ctx)
			return err
		}
	}
	return nil
}

// Resume thaws every writer; gone ones are skipped.
func (w *frozenWriters) Resume(context.Context) error {
	var errs []error
	for _, ref := range w.refs() {
		if err := holders.Thaw(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
			errs = append(errs, err)
		}
	}
	w.stopped = false
	return errors.Join(errs...)
}

// release lets the writers go after a restore by policy: resume
// (SIGCONT), kill (SIGKILL while stopped), terminate (SIGTERM, SIGCONT,
// grace, then SIGKILL) or hold (left frozen for the operator). It returns
// exitPartial when a writer could not be released as asked.
func (w *frozenWriters) release(ctx context.Context, pol incident.Policy, grace time.Duration, out, errw io.Writer) int {
	refs := w.refs()
	code := exitOK
	fail := func(ref holders.ProcRef, what string, err error) {
		fmt.Fprintf(errw, "agentctl restore: pid %d: %s: %v\n", ref.Pid, what, err)
		code = exitPartial
	}
	switch pol {
	case incident.PolicyHold:
		for _, ref := range refs {
			fmt.Fprintf(out, "  writer pid %d left frozen (policy hold): kill -CONT %d resumes it, kill -KILL %d ends it\n", ref.Pid, ref.Pid, ref.Pid)
		}
		return exitOK
	case incident.PolicyKill:
		for _, ref := range refs {
			if err := holders.Kill(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
				fail(ref, "kill", err)
				continue
			}
			fmt.Fprintf(out, "  writer pid %d killed (policy kill)\n", ref.Pid)
		}
		return code
	case incident.PolicyTerminate:
		for _, ref := range refs {
			if err := holders.Terminate(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
				fail(ref, "terminate", err)
			}
			if err := holders.Thaw(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
				fail(ref, "resume after SIGTERM", err)
			}
		}
		gctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		for _, ref := range refs {
			if err := holders.WaitGone(gctx, ref); err == nil {
				fmt.Fprintf(out, "  writer pid %d terminated (policy terminate)\n", ref.Pid)
				continue
			}
			if err := holders.Kill(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
				fail(ref, "kill after the terminate grace", err)
				continue
			}
			fmt.Fprintf(out, "  writer pid %d killed: still running %v after SIGTERM (policy terminate)\n", ref.Pid, grace)
		}
		return code
	}
	// resume, and observe, which never signals: the only release it has.
	for _, ref := range refs {
		if err := holders.Thaw(ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
			fail(ref, "resume", err)
			continue
		}
		fmt.Fprintf(out, "  writer pid %d resumed (policy %s)\n", ref.Pid, pol)
	}
	return code
}
