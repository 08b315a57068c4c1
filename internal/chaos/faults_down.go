package main

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Faults made while agentd is stopped (issue 30): agentd is stopped as
// an upgrade or `systemctl stop` stops it (SIGTERM: it journals every
// store's WAL position on the way out), the operator runs the tool of the
// fault of the same name without "-down", and agentd is started again at
// once. Its first look at the store must find the change (the WAL no
// longer fits the main, or the writers hold a main renamed aside) before
// a writer checkpoints again; a writer that checkpoints inside that
// window writes its frames into the copy before any agent runs, which no
// agent can undo.
const (
	FaultCpInplaceDown    = "cp-inplace-down"
	FaultRsyncInplaceDown = "rsync-inplace-down"
	FaultMvAsideCopyDown  = "mv-aside-copy-down"
)

// DownFaults are the "while down" kinds.
var DownFaults = []string{FaultCpInplaceDown, FaultRsyncInplaceDown, FaultMvAsideCopyDown}

// downBase is the tool fault a while-down kind runs ("" for other kinds).
func downBase(kind string) string {
	switch kind {
	case FaultCpInplaceDown:
		return FaultCpInplace
	case FaultRsyncInplaceDown:
		return FaultRsyncInplace
	case FaultMvAsideCopyDown:
		return FaultMvAsideCopy
	}
	return ""
}

// downFault stops agentd, runs the tool fault, and starts agentd again.
// The restore is recorded as toolFault records it, under the down kind.
func (r *run) downFault(ctx context.Context, kind string, p *profile) (string, error) {
	bk, bkAt, err := r.backup(ctx, p)
	if err != nil {
		return "", err
	}
	aside := ""
	if downBase(kind) == FaultMvAsideCopy {
		aside = p.asideName()
	}
	script := toolScript(downBase(kind), bk, aside)
	age := r.between(time.Second, 4*time.Second)
	sleepCtx(ctx, age)
	restart, ok := r.agent.stopForFault()
	if !ok {
		return "agentd was already down; nothing done", nil
	}
	defer restart()
	if aside != "" {
		p.addOperatorFile(aside)
	}
	start := time.Now()
	out, err := runOperator(ctx, p.dir, script)
	done := time.Now()
	p.recordRestore(restore{Start: start, At: done, Backup: bk, BackupAt: bkAt, Kind: kind, Command: script})
	if err != nil {
		return "", fmt.Errorf("`%s` in %s with agentd stopped: %v: %s", script, p.dir, err, out)
	}
	return fmt.Sprintf("agentd stopped; `%s` in %s (backup %v old) ran %v from %s; agentd started again", script, p.dir,
		age.Round(time.Millisecond), done.Sub(start).Round(time.Microsecond), start.UTC().Format("15:04:05.000000")), nil
}

// stopForFault stops agentd with SIGTERM and keeps the keeper from
// starting it again until start is called (or a minute passes).
func (a *agentProc) stopForFault() (start func(), ok bool) {
	a.mu.Lock()
	if !a.up {
		a.mu.Unlock()
		return nil, false
	}
	select {
	case <-a.wakeC: // a token left from before would cut this stop short
	default:
	}
	a.killedByUs, a.restartIn = true, time.Minute
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	return func() {
		select {
		case a.wakeC <- struct{}{}:
		default:
		}
	}, true
}
