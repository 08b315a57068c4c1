package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/service"
)

// scanHolders is the real holder scan of one store, judged by the
// config's verdict rule (env.scan).
func scanHolders(path string, rule holders.Rule) (*holders.StoreResult, error) {
	res, err := holders.ScanWith([]holders.Target{{Path: path}}, holders.Options{Rule: rule})
	if err != nil {
		return nil, err
	}
	sr := res.Store(path)
	if sr == nil {
		return nil, fmt.Errorf("the holder scan has no result for %s", path)
	}
	return sr, nil
}

func restoreUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl restore BACKUP (--profile P [--home H] | --db PATH)
                        [--stop-writers [--release POLICY]] [--force]

Restores a Hermes store from BACKUP, a SQLite file that must pass
integrity_check and have the Hermes tables. A healthy store gets the backup's
pages copied into the live file (SQLite's online backup; the inode is kept, so
open connections see the restored rows). A missing or broken store gets the
backup published (temp file, fsync, rename, directory fsync) only when a holder
scan proves no process holds it. A safety copy of the store is taken next to
it first (state.db.pre-restore-<UTC>). With agentd running, the restore is
announced to it, so the change is not taken for an incident.

Processes holding the store: refused, unless --stop-writers, which freezes them
for the restore and then releases them by --release (default: the configured
policy for replaced stores, terminate). A scan that cannot see every process
(unknown): refused, unless --force; --force never lets a publish replace a main
or remove sidecars.
`, `Exit codes: 0 restored, 1 error (nothing changed unless it says so), 2 usage,
3 refused (holders, unknown scan, open incident), 4 restored but a writer
could not be released as asked.
`)
}

type restoreFlags struct {
	storeFlags
	stopWriters bool
	force       bool
	release     string
	config      string
	socket      string
}

func runRestore(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "restore", restoreUsage)
	fs := v.fs
	var f restoreFlags
	f.storeFlags.register(fs, "Hermes profile whose store to restore", "path of the store (state.db) to restore, instead of --profile")
	fs.BoolVar(&f.stopWriters, "stop-writers", false, "freeze the processes holding the store for the restore, then release them")
	fs.BoolVar(&f.force, "force", false, "restore although the holder scan cannot see every process")
	fs.StringVar(&f.release, "release", "", "with --stop-writers: terminate, kill, resume or hold (default: the config's replaced policy)")
	fs.StringVar(&f.config, "config", "", "agentd config file to read the release policy from (default: the usual one)")
	fs.StringVar(&f.socket, "socket", "", "agentd control socket (default $"+socketEnv+", else the usual one)")
	pos, code, ok := v.parse(args, func(pos []string) string {
		switch {
		case len(pos) != 1:
			return fmt.Sprintf("need exactly one BACKUP file, got %d", len(pos))
		case f.db == "" && f.profile == "":
			return "name the store: --profile P (restore never picks one for you), or --db PATH"
		case f.mixed() != "":
			return f.mixed()
		case f.release != "" && !f.stopWriters:
			return "--release applies only with --stop-writers"
		}
		if f.release != "" {
			if _, err := restorePolicy(f.release); err != nil {
				return err.Error()
			}
		}
		return ""
	})
	if !ok {
		return code
	}
	target, err := f.resolve(e)
	if err != nil {
		return v.fail(err)
	}
	// The daemon and the holder scan know the store by its resolved path.
	if dir, err := filepath.EvalSymlinks(filepath.Dir(target)); err == nil {
		target = filepath.Join(dir, filepath.Base(target))
	}
	r := &restoreRun{e: e, f: f, target: target, backup: expandHome(pos[0], e.getenv)}
	return r.run(ctx)
}

// restoreRun is one agentctl restore.
type restoreRun struct {
	e      *env
	f      restoreFlags
	target string
	backup string

	plan      *recovery.RestorePlan
	daemon    *client
	daemonPID int
	rule      holders.Rule
}

func (r *restoreRun) errorf(format string, args ...any) {
	fmt.Fprintf(r.e.stderr, "agentctl restore: "+format+"\n", args...)
}

func (r *restoreRun) run(ctx context.Context) int {
	plan, err := recovery.PlanRestore(ctx, recovery.RestoreRequest{Backup: r.backup, Target: r.target})
	if err != nil {
		r.errorf("%v", err)
		if errors.Is(err, recovery.ErrBackupInvalid) && !strings.Contains(err.Error(), "hint:") {
			r.errorf("hint: name a SQLite backup of a Hermes state.db (one `sqlite3 state.db \".backup FILE\"` or a capture wrote)")
		}
		r.errorf("nothing was changed")
		return exitError
	}
	defer plan.Close()
	r.plan = plan
	out := r.e.stdout
	fmt.Fprintf(out, "backup %s: %s (%s)\n", plan.Backup, plan.BackupRows, plan.BackupShape)
	fmt.Fprintf(out, "store %s: %s", plan.Target, plan.TargetState)
	if plan.TargetState == "healthy" {
		fmt.Fprintf(out, ", %s", plan.Before)
	}
	fmt.Fprintf(out, "; %s restore\n", plan.Mode)

	if code, ok := r.announce(ctx); !ok {
		return code
	}
	result := "failed"
	defer func() { r.finish(result) }()

	rule, err := scanRule(r.f.config, r.e.getenv)
	if err != nil {
		r.errorf("%v; the holder scan judges by the strict verdict rule", err)
	}
	r.rule = rule
	sr, err := r.e.scan(plan.Target, rule)
	if err != nil {
		r.errorf("holder scan of %s failed: %v; refusing (nothing was changed)", plan.Target, err)
		result = "refused: holder scan failed"
		return exitRefused
	}
	procs := r.others(sr.Holders)
	if sr.Uninspected.Count > 0 {
		fmt.Fprintf(out, "holder scan (rule %s): %s\n", sr.Rule, sr.Uninspected.Summary)
	}
	writers, code := r.decide(ctx, procs, sr.Blind)
	if code != exitOK {
		result = "refused"
		return code
	}
	opts := recovery.RestoreOptions{Clear: len(procs) == 0 && len(sr.Blind) == 0}
	if writers != nil {
		opts.Writers = writers // never a typed nil in the interface
	}
	res, err := plan.Execute(ctx, opts)
	if err != nil {
		if writers != nil {
			if rerr := writers.Resume(context.WithoutCancel(ctx)); rerr != nil {
				r.errorf("resume the frozen writers: %v", rerr)
			}
		}
		r.errorf("%v", err)
		if errors.Is(err, recovery.ErrRestoreRefused) {
			result = "refused"
			return exitRefused
		}
		return exitError
	}
	result = "done"
	r.report(res)
	if writers == nil {
		return exitOK
	}
	pol, grace := r.releasePolicy()
	return writers.release(ctx, pol, grace, out, r.e.stderr)
}

// announce tells a running agentd about the restore. It returns false
// with an exit code when the restore must not go on.
func (r *restoreRun) announce(ctx context.Context) (int, bool) {
	cl := newClient(socketPath(r.f.socket, r.e.getenv))
	var in control.RestoreIntent
	err := cl.post(ctx, "/v1/restore/begin", control.RestoreBeginRequest{Store: r.plan.Target, PID: os.Getpid(),
		Mode: string(r.plan.Mode), Backup: r.plan.Backup}, &in)
	var ae *apiError
	switch {
	case err == nil:
		r.daemon, r.daemonPID = cl, in.DaemonPID
		fmt.Fprintf(r.e.stdout, "agentd (pid %d) knows this restore is intended\n", in.DaemonPID)
	case errors.Is(err, errDaemonNotRunning):
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		fmt.Fprintf(r.e.stdout, "agentd runs but does not watch %s; restoring without it\n", r.plan.Target)
	case errors.As(err, &ae) && ae.Status == http.StatusConflict:
		r.errorf("refused by agentd: %s", ae.Msg)
		r.errorf("nothing was changed")
		return exitRefused, false
	default:
		r.errorf("cannot announce the restore to agentd: %v; refusing to change a store a daemon watches behind its back (nothing was changed)", err)
		return exitError, false
	}
	return exitOK, true
}

// finish ends the daemon's restore window, even when ctx was cancelled.
func (r *restoreRun) finish(result string) {
	if r.daemon == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.daemon.post(ctx, "/v1/restore/end", control.RestoreEndRequest{Store: r.plan.Target, PID: os.Getpid(), Result: result}, nil); err != nil {
		r.errorf("tell agentd the restore ended: %v (its window lapses by itself)", err)
	}
}

// others drops agentd from the holders: its guard and pins only read,
// and it knows about the restore.
func (r *restoreRun) others(ps []holders.Process) []holders.Process {
	var out []holders.Process
	for _, p := range ps {
		if r.daemonPID != 0 && p.Pid == r.daemonPID {
			continue
		}
		out = append(out, p)
	}
	return out
}

// decide applies the holder rules and returns the writers to stop, or an
// exit code other than exitOK to stop here.
func (r *restoreRun) decide(ctx context.Context, procs []holders.Process, blind []holders.Blind) (*frozenWriters, int) {
	if len(procs) > 0 && r.plan.Mode == recovery.RestorePublish {
		r.errorf("refused: %d process(es) hold files of %s, which is %s:", len(procs), r.plan.Target, r.plan.TargetState)
		printHolders(r.e.stderr, procs)
		r.errorf("publishing a new main would leave them writing into files nobody can see; stop them first (--stop-writers does not help here). Nothing was changed.")
		return nil, exitRefused
	}
	if len(procs) > 0 && !r.f.stopWriters {
		r.errorf("refused: %d process(es) hold %s:", len(procs), r.plan.Target)
		printHolders(r.e.stderr, procs)
		r.errorf("stop them, or pass --stop-writers to freeze them for the restore and release them afterwards. Nothing was changed.")
		return nil, exitRefused
	}
	if len(blind) > 0 && !r.f.force {
		r.errorf("refused: the holder scan cannot see every process that could open %s (verdict unknown):", r.plan.Target)
		printBlind(r.e.stderr, blind)
		r.errorf("run as root (or the store's owner with the capabilities agentd has), or pass --force to restore anyway. Nothing was changed.")
		return nil, exitRefused
	}
	if len(blind) > 0 {
		fmt.Fprintf(r.e.stdout, "--force: %d process(es) could not be inspected; restoring anyway\n", len(blind))
	}
	if len(procs) == 0 {
		return nil, exitOK
	}
	if _, _, err := r.loadPolicy(); err != nil {
		r.errorf("%v; pass --release to say how to release the writers. Nothing was changed.", err)
		return nil, exitError
	}
	w := &frozenWriters{target: r.plan.Target, rule: r.rule, skip: r.daemonPID, out: r.e.stdout, scan: r.e.scan}
	for _, p := range procs {
		w.add(p)
	}
	return w, exitOK
}

func printHolders(w io.Writer, ps []holders.Process) {
	for _, p := range ps {
		var roles []string
		for _, f := range p.Files {
			s := string(f.Role)
			if !f.Current {
				s += " (deleted or replaced)"
			}
			roles = append(roles, s)
		}
		name := filepath.Base(p.Exe)
		if name == "." || name == "" {
			name = "?"
		}
		how := ""
		if !p.Inspected {
			how = " [seen by its lock only: it could not be inspected]"
		}
		fmt.Fprintf(w, "  pid %d %s (user %s): %s%s\n", p.Pid, name, p.User, strings.Join(roles, ", "), how)
	}
}

func printBlind(w io.Writer, bs []holders.Blind) {
	for _, b := range bs {
		if b.Pid == 0 {
			fmt.Fprintf(w, "  %s\n", b.Reason)
			continue
		}
		fmt.Fprintf(w, "  pid %d: %s\n", b.Pid, b.Reason)
	}
}

func (r *restoreRun) report(res recovery.RestoreResult) {
	out := r.e.stdout
	how := "pages copied into the live file, inode " + res.MainAfter.String() + " kept"
	if res.Mode == recovery.RestorePublish {
		how = "published as a new file, inode " + res.MainAfter.String()
	} else if res.MainAfter != res.MainBefore {
		how = fmt.Sprintf("pages copied, but the main file is now inode %s (was %s)", res.MainAfter, res.MainBefore)
	}
	fmt.Fprintf(out, "restored %s into %s (%s: %s)\n", res.Backup, res.Target, res.Mode, how)
	if len(res.SafetyCopy) > 0 {
		fmt.Fprintf(out, "  safety copy: %s\n", strings.Join(res.SafetyCopy, ", "))
	} else {
		fmt.Fprintln(out, "  safety copy: none, there was no store to copy")
	}
	for _, s := range res.RemovedSidecars {
		fmt.Fprintf(out, "  removed leftover %s\n", s)
	}
	fmt.Fprintf(out, "  before: %s\n", res.Before)
	fmt.Fprintf(out, "  backup: %s\n", res.BackupRows)
	fmt.Fprintf(out, "  after:  %s; integrity_check %s\n", res.After, res.Integrity)
}

// restorePolicy parses --release.
func restorePolicy(s string) (incident.Policy, error) {
	switch p := incident.Policy(s); p {
	case incident.PolicyTerminate, incident.PolicyKill, incident.PolicyResume, incident.PolicyHold:
		return p, nil
	}
	return "", fmt.Errorf("--release %q: want terminate, kill, resume or hold", s)
}

// loadPolicy is how the frozen writers are released: --release, else the
// config's policy for replaced stores (a restore replaces what the
// writers had), and the terminate grace.
func (r *restoreRun) loadPolicy() (incident.Policy, time.Duration, error) {
	path, explicit := r.f.config, r.f.config != ""
	if !explicit {
		path = service.DefaultConfigPath(r.e.getenv, os.Geteuid())
	}
	cfg, err := service.Load(path, explicit)
	if err != nil {
		if r.f.release != "" {
			p, _ := restorePolicy(r.f.release)
			return p, incident.DefaultGrace, nil
		}
		return "", 0, err
	}
	ps := cfg.PolicyFor(r.plan.Target)
	pol := ps.Replaced
	if r.f.release != "" {
		pol, _ = restorePolicy(r.f.release)
	}
	return pol, ps.GraceOrDefault(), nil
}

func (r *restoreRun) releasePolicy() (incident.Policy, time.Duration) {
	pol, grace, err := r.loadPolicy()
	if err != nil {
		// decide() checked it; the file changed since. Never leave
		// writers frozen by accident.
		return incident.PolicyResume, 0
	}
	return pol, grace
}
