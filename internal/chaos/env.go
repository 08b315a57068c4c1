package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// env is the temp tree of one run:
//
//	<root>/home/              HERMES_HOME: state.db, profiles/<name>/state.db
//	<root>/state/, run/       agentd's state directory and control socket
//	<root>/bin/               agentd and the test writer, built for this run
//	<root>/acks/, backups/    writers' ack files, restore sources
//	<root>/logs/              agentd-<n>.log per incarnation, writer logs, chaos.log
type env struct {
	root, home, stateDir, socket, config string
	bin, acks, backups, logs             string
	agentd, writer                       string

	profiles []*profile
	// tmpfs is the profile on a small tmpfs for the full-disk fault, nil
	// when the mount was not possible (tmpfsSkip says why).
	tmpfs     *profile
	tmpfsSkip string
}

// profile is one store of the home and what the faults did to it.
type profile struct {
	name, dir, db string
	canceller     bool // its only writer cancels its own POSIX locks
	onTmpfs       bool
	corrupt       bool // a backup found the store malformed (cycles goroutine only)

	mu       sync.Mutex
	nBackup  int
	restores []restore
	// operatorFiles are files the faults created in the profile
	// directory as an operator would (state.db.old): not the agent's
	// leftovers; removed by the harness once nothing needs them.
	operatorFiles map[string]bool
}

// restore is one intended restore: rows stamped before Start may be
// rolled back, rows stamped after At must survive, and rows stamped in
// between were committed while the tool was writing the store (a rename
// takes microseconds; cp, rsync, tar and sqlite3 take longer).
type restore struct {
	Start    time.Time // just before the rename or the tool began
	At       time.Time // when the rename or the tool returned
	Backup   string    // the file restored, kept for the final check
	BackupAt time.Time // when the backup started reading
	Kind     string
	Command  string // the operator's command line, for tool faults
}

func (p *profile) allRestores() []restore {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]restore(nil), p.restores...)
}

func (p *profile) recordRestore(r restore) {
	p.mu.Lock()
	p.restores = append(p.restores, r)
	p.mu.Unlock()
}

// tmpfsSize bounds the full-disk profile's filesystem: room for the store
// and a few captures, small enough to fill in a blink.
const tmpfsSize = "192m"

func newEnv(parent string, profiles int) (*env, error) {
	root, err := os.MkdirTemp(parent, "stateguard-chaos-")
	if err != nil {
		return nil, fmt.Errorf("create chaos temp dir in %q: %w", parent, err)
	}
	e := &env{root: root, home: filepath.Join(root, "home"), stateDir: filepath.Join(root, "state"),
		socket: filepath.Join(root, "run", "agent.sock"), config: filepath.Join(root, "agent.toml"),
		bin: filepath.Join(root, "bin"), acks: filepath.Join(root, "acks"), backups: filepath.Join(root, "backups"),
		logs: filepath.Join(root, "logs")}
	e.agentd, e.writer = filepath.Join(e.bin, "agentd"), filepath.Join(e.bin, "writer")
	for _, d := range []string{e.home, e.stateDir, filepath.Dir(e.socket), e.bin, e.acks, e.backups, e.logs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return e, fmt.Errorf("create %s: %w", d, err)
		}
	}
	for i := range profiles {
		p := &profile{name: "default", dir: e.home}
		if i > 0 {
			p.name = fmt.Sprintf("p%d", i)
			p.dir = filepath.Join(e.home, "profiles", p.name)
			if err := os.MkdirAll(p.dir, 0o700); err != nil {
				return e, fmt.Errorf("create profile dir %s: %w", p.dir, err)
			}
		}
		p.db = filepath.Join(p.dir, "state.db")
		p.canceller = i == 1
		e.profiles = append(e.profiles, p)
	}
	// The full-disk profile is the last named one that is not the
	// lock-cancelling one, so every fault keeps a target of its own.
	if profiles < 3 {
		e.tmpfsSkip = "needs -profiles 3 or more (a named profile of its own on a tmpfs)"
		return e, nil
	}
	last := e.profiles[len(e.profiles)-1]
	if err := mountTmpfs(last.dir, tmpfsSize); err != nil {
		e.tmpfsSkip = fmt.Sprintf("no tmpfs for the capture directory: %v", err)
		return e, nil
	}
	last.onTmpfs, e.tmpfs = true, last
	return e, nil
}

// writeConfig writes agentd's config: default policies, everything inside
// the temp tree, only this home discovered, the run's reconcile interval.
func (e *env) writeConfig(guard bool, reconcile time.Duration, level string) error {
	if level == "" {
		level = "info"
	}
	cfg := fmt.Sprintf(`# written by internal/chaos
state_dir = %q
socket = %q
reconcile = %q
guard = %t
discover_users = false
homes = [%q]

[log]
format = "json"
level = %q
`, e.stateDir, e.socket, reconcile.String(), guard, e.home, level)
	return os.WriteFile(e.config, []byte(cfg), 0o600)
}

// build compiles agentd and the writer from the working tree.
func (e *env) build(ctx context.Context) error {
	var werr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		werr = hermestest.BuildWriter(e.writer)
	}()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", e.agentd, "github.com/stateguard/stateguard/cmd/agentd")
	out, aerr := cmd.CombinedOutput()
	<-done
	if aerr != nil {
		return fmt.Errorf("build agentd: %v\n%s", aerr, out)
	}
	return werr
}

// cleanup unmounts the tmpfs (copying it out first when the tree is kept)
// and removes the tree unless keep.
func (e *env) cleanup(keep bool) error {
	var errs []error
	if e.tmpfs != nil {
		if keep {
			dst := e.tmpfs.dir + ".tmpfs-copy"
			if out, err := exec.Command("cp", "-a", e.tmpfs.dir, dst).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("copy tmpfs profile out to %s: %v: %s", dst, err, strings.TrimSpace(string(out))))
			}
		}
		if err := unmount(e.tmpfs.dir); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w (hint: umount -l it by hand)", e.tmpfs.dir, err))
		} else {
			e.tmpfs = nil
		}
	}
	if !keep && e.tmpfs == nil {
		if err := os.RemoveAll(e.root); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", e.root, err))
		}
	}
	return errors.Join(errs...)
}
