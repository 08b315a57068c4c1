package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// addOperatorFile records name (in p's directory) as the operator's own
// file, made by a fault: the final check does not count it as left over.
func (p *profile) addOperatorFile(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.operatorFiles == nil {
		p.operatorFiles = map[string]bool{}
	}
	p.operatorFiles[name] = true
}

// operatorNames lists p's operator files, sorted.
func (p *profile) operatorNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.operatorFiles))
	for n := range p.operatorFiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (p *profile) isOperatorFile(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.operatorFiles[name]
}

// pruneOperatorFiles removes the operator files of p (state.db.old of
// mv-aside-copy) that nothing can need any more, as an operator tidies up
// after the restore: only when no incident of the store is unfinished and
// no process of the run holds the file's inode (a writer still on the old
// generation, or the agent's pin). Removing it earlier would unlink an
// orphan under its writer: a fault of its own, not the one measured. Only
// the run's own processes are looked at: nothing else on the host opens
// files in its temp tree, and a host-wide look cannot vouch for processes
// it may not inspect.
func (r *run) pruneOperatorFiles(ctx context.Context, p *profile) {
	names := p.operatorNames()
	if len(names) == 0 || !r.agent.isUp() {
		return
	}
	incs, err := r.agent.incidents(ctx, false)
	if err != nil {
		return
	}
	for _, in := range incs {
		if in.Store == p.db {
			return
		}
	}
	for _, n := range names {
		path := filepath.Join(p.dir, n)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		held, err := inodeHeld(path, r.runPids())
		if err != nil || held {
			continue
		}
		if err := os.Remove(path); err == nil {
			r.log.Info("operator file removed", "profile", p.name, "file", n)
		}
	}
}

// runPids lists the processes of the run that may hold a store file: every
// writer running now and agentd.
func (r *run) runPids() []int {
	var pids []int
	for _, s := range r.slots {
		if pid := s.pid(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	if pid := r.agent.pid(); pid != 0 {
		pids = append(pids, pid)
	}
	return pids
}
