package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/version"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

type checkStatus string

const (
	statusOK   checkStatus = "ok"
	statusWarn checkStatus = "warn"
	statusFail checkStatus = "fail"
)

// checkResult is one line of the doctor's report. Fix is one line the
// operator can act on; it is empty when there is nothing to do.
type checkResult struct {
	Name    string      `json:"name"`
	Status  checkStatus `json:"status"`
	Summary string      `json:"summary"`
	Details []string    `json:"details,omitempty"`
	Fix     string      `json:"fix,omitempty"`
}

// doctorInput is everything the checks read of the host, so a test can
// plant each problem: /proc files, sysctl files, the euid.
type doctorInput struct {
	goos           string
	euid           int
	getenv         func(string) string
	configPath     string
	configExplicit bool
	// procStatus is the status file whose Uid and CapEff are checked;
	// "" means the running agentd's (pid from its lock file), else
	// /proc/self/status.
	procStatus   string
	mountinfo    string
	locks        string // /proc/locks
	maxWatches   string // sysctl fs.inotify.max_user_watches as a file
	maxInstances string
	// discover is where stores are looked for; the config's homes and
	// stores are added.
	discover store.DiscoverOptions
	// unitPaths are the service files that count as installed; nil means
	// the native manager's system and user paths.
	unitPaths []string
	// unitDirs are where the system unit and its drop-ins are looked for
	// (nil: systemd's own directories); agentdMountinfo is the running
	// agentd's mountinfo ("": /proc/<pid>/mountinfo of the agentd whose
	// pid the lock file holds).
	unitDirs        []string
	agentdMountinfo string
	now             time.Time
	timeout         time.Duration // for the daemon probe
}

// doctorHost is what the checks learned once and share.
type doctorHost struct {
	cfg      *service.Config
	stateDir string
	homes    []store.Home
	stores   []store.Store
	problems []store.Problem
	journal  journalFacts
}

func runDoctor(ctx context.Context, in doctorInput) []checkResult {
	var out []checkResult
	cfg, res := checkConfig(in)
	out = append(out, res)
	h := doctorHost{cfg: cfg, stateDir: cfg.StateDir}
	if h.stateDir == "" {
		h.stateDir = control.DefaultStateDir(in.getenv, in.euid)
	}
	h.homes, h.stores, h.problems = discoverForDoctor(in, cfg)
	h.journal = readJournal(ctx, h.stateDir, in.now)

	proc := readProcStatusFor(in, h.stateDir)
	out = append(out, checkPrivileges(in, proc))
	out = append(out, checkHidepid(in, proc))
	out = append(out, checkVerdictRule(in, cfg, proc))
	out = append(out, checkInotify(in, watchDirs(h.homes, h.stores)))
	out = append(out, checkSQLite(ctx))
	out = append(out, checkDaemon(ctx, in, cfg))
	out = append(out, checkServiceInstalled(in))
	out = append(out, checkServiceWritable(in, h.homes, h.stateDir))
	out = append(out, checkStateDir(h.stateDir, in.euid))
	out = append(out, checkStores(h.stores, h.problems))
	out = append(out, checkCaptures(h.stores, h.journal))
	out = append(out, checkHermesDiverts(ctx, h.stores))
	out = append(out, checkReplayJobs(h.journal))
	out = append(out, checkUnrecoverable(h.journal))
	out = append(out, checkGuard(cfg, h.journal))
	return out
}

func checkConfig(in doctorInput) (*service.Config, checkResult) {
	r := checkResult{Name: "config"}
	cfg, err := service.Load(in.configPath, in.configExplicit)
	if err != nil {
		cfg = &service.Config{}
		cfg.ApplyDefaults()
		r.Status, r.Summary = statusFail, err.Error()
		r.Fix = "correct the named key; a running agentd keeps its last good config until then (the other checks use the defaults)"
		return cfg, r
	}
	r.Status = statusOK
	if cfg.Path == "" {
		r.Summary = fmt.Sprintf("no config file at %s: agentd runs with the defaults", orNone(in.configPath))
	} else {
		r.Summary = cfg.Path + " is valid"
	}
	return cfg, r
}

func orNone(s string) string {
	if s == "" {
		return "(no path: HOME unset)"
	}
	return s
}

func discoverForDoctor(in doctorInput, cfg *service.Config) ([]store.Home, []store.Store, []store.Problem) {
	o := in.discover
	if o.Getenv == nil {
		o.Getenv = in.getenv
	}
	o.ExtraHomes = append(append([]string(nil), o.ExtraHomes...), cfg.Homes...)
	for _, s := range cfg.Stores {
		o.ExtraStores = append(o.ExtraStores, s.Path)
	}
	if cfg.DiscoverUsers != nil && !*cfg.DiscoverUsers {
		o.CurrentUserOnly = true
	}
	homes, _ := store.DiscoverHomes(o)
	stores, problems := store.Discover(o)
	return homes, stores, problems
}

// watchDirs are the directories agentd puts an inotify watch on: every
// store's directory, every home, and every home's profiles/ (to see new
// profiles appear).
func watchDirs(homes []store.Home, stores []store.Store) []string {
	seen := map[string]bool{}
	var out []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, h := range homes {
		add(h.Root)
		if fi, err := os.Stat(filepath.Join(h.Root, "profiles")); err == nil && fi.IsDir() {
			add(filepath.Join(h.Root, "profiles"))
		}
	}
	for _, s := range stores {
		add(s.Dir())
	}
	return out
}

// procStatus is what the privilege checks need of /proc/<pid>/status.
type procStatus struct {
	who    string // "agentd (pid N)" or "agentctl (uid N)"
	euid   int
	capEff uint64
	err    error
}

// Capability bits (linux/capability.h) of service.Capabilities.
var neededCaps = []struct {
	name string
	bit  uint
}{{"CAP_SYS_PTRACE", 19}, {"CAP_DAC_READ_SEARCH", 2}, {"CAP_KILL", 5}, {"CAP_CHOWN", 0}, {"CAP_FOWNER", 3}}

func checkSQLite(ctx context.Context) checkResult {
	r := checkResult{Name: "sqlite"}
	v, err := version.SQLite(ctx)
	if err != nil {
		r.Status, r.Summary = statusFail, fmt.Sprintf("cannot ask the embedded SQLite its version: %v", err)
		r.Fix = "reinstall agentctl; the build is broken"
		return r
	}
	if store.CheckSQLiteVersion(v) != nil {
		r.Status = statusFail
		r.Summary = fmt.Sprintf("embedded SQLite %s is older than %s, which fixes a WAL-reset corruption", v, store.MinSQLiteVersion)
		r.Fix = "upgrade stateguard (a build with modernc.org/sqlite embedding SQLite ≥ " + store.MinSQLiteVersion + ")"
		return r
	}
	r.Status, r.Summary = statusOK, fmt.Sprintf("embedded SQLite %s (≥ %s)", v, store.MinSQLiteVersion)
	return r
}

// checkDaemon asks agentd for its status over the control socket: the
// config's socket, $STATEGUARD_SOCKET, or the default path.
func checkDaemon(ctx context.Context, in doctorInput, cfg *service.Config) checkResult {
	r := checkResult{Name: "daemon"}
	path := cfg.Socket
	if path == "" {
		path = in.getenv("STATEGUARD_SOCKET")
	}
	if path == "" {
		if dir := control.DefaultRuntimeDir(in.getenv, in.euid); dir != "" {
			path = filepath.Join(dir, control.SocketFile)
		}
	}
	fi, err := os.Lstat(path)
	switch {
	case path == "" || errors.Is(err, fs.ErrNotExist):
		r.Status, r.Summary = statusWarn, fmt.Sprintf("agentd is not running (no control socket at %s)", orNone(path))
		r.Fix = "`agentd start` (installed service) or `agentd run` in a terminal"
		return r
	case err != nil:
		r.Status, r.Summary = statusWarn, fmt.Sprintf("cannot look at the control socket %s: %v", path, err)
		r.Fix = "run agentctl doctor as root or as agentd's user"
		return r
	case fi.Mode().Type() != fs.ModeSocket:
		r.Status, r.Summary = statusFail, fmt.Sprintf("%s is not a socket (%s): agentd cannot listen there", path, fi.Mode().Type())
		r.Fix = "move it away, then `agentd restart`"
		return r
	}
	timeout := in.timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agentd/v1/status", nil)
	if err != nil {
		r.Status, r.Summary = statusFail, err.Error()
		return r
	}
	resp, err := hc.Do(req)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		r.Status, r.Summary = statusFail, fmt.Sprintf("the control socket %s exists but nobody listens: agentd died without cleaning up", path)
		r.Fix = "`agentd restart`, and look at its log (`journalctl -u " + service.UnitName + "`) for why it stopped"
	case errors.Is(err, fs.ErrPermission):
		r.Status, r.Summary = statusWarn, fmt.Sprintf("uid %d may not connect to %s", in.euid, path)
		r.Fix = "run agentctl doctor as root or as agentd's user"
	case err != nil:
		r.Status, r.Summary = statusFail, fmt.Sprintf("agentd does not answer on %s: %v", path, err)
		r.Fix = "`agentd restart`; if it hangs again, send SIGQUIT and report the stack dump"
	default:
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			r.Status, r.Summary = statusOK, "agentd answers on "+path
		} else {
			r.Status, r.Summary = statusWarn, fmt.Sprintf("agentd on %s answered HTTP %d to GET /v1/status", path, resp.StatusCode)
			r.Fix = "run agentctl doctor as root or as agentd's user (the socket admits only those)"
		}
	}
	return r
}

func checkServiceInstalled(in doctorInput) checkResult {
	r := checkResult{Name: "service"}
	paths := in.unitPaths
	if paths == nil {
		kind := service.NativeKind()
		if kind == "" {
			r.Status, r.Summary = statusOK, "no supported service manager on "+in.goos+": start `agentd run` from your init system"
			return r
		}
		for _, s := range []service.Scope{service.SystemScope, service.UserScope} {
			if p, err := service.UnitPath(kind, s, in.getenv); err == nil {
				paths = append(paths, p)
			}
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			r.Status, r.Summary = statusOK, "installed: "+p
			return r
		}
	}
	r.Status = statusWarn
	r.Summary = "agentd is not installed as a service (none of " + strings.Join(paths, ", ") + "): it will not start at boot"
	r.Fix = "`sudo agentd install` (every user's stores), or `agentd install --user` (your own)"
	return r
}

func checkStateDir(dir string, euid int) checkResult {
	r := checkResult{Name: "state dir"}
	if dir == "" {
		r.Status, r.Summary = statusFail, "no state directory: HOME and XDG_STATE_HOME are unset"
		r.Fix = "set state_dir in the config"
		return r
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.Status, r.Summary = statusOK, dir+" does not exist yet: agentd creates it (0700) when it first starts"
		return r
	case err != nil:
		r.Status, r.Summary = statusWarn, fmt.Sprintf("cannot look at %s: %v", dir, err)
		r.Fix = "run agentctl doctor as root or as agentd's user"
		return r
	case fi.Mode()&fs.ModeSymlink != 0:
		r.Status, r.Summary = statusFail, dir+" is a symlink: agentd refuses it"
		r.Fix = "set state_dir to the real directory"
		return r
	case !fi.IsDir():
		r.Status, r.Summary = statusFail, dir+" is not a directory"
		r.Fix = "move it aside; agentd creates the directory"
		return r
	case fi.Mode().Perm()&0o022 != 0:
		r.Status, r.Summary = statusFail, fmt.Sprintf("%s has mode %04o: others could swap the journal; agentd refuses it", dir, fi.Mode().Perm())
		r.Fix = "chmod 700 " + dir
		return r
	}
	if uid := fileid.Of(fi).UID; uid >= 0 && uid != euid {
		r.Status, r.Summary = statusFail, fmt.Sprintf("%s is owned by uid %d, not %d: agentd running as uid %d refuses it", dir, uid, euid, euid)
		r.Fix = fmt.Sprintf("chown %d %s, or run agentctl doctor as the agent's user", euid, dir)
		return r
	}
	if err := canWrite(dir); err != nil {
		r.Status, r.Summary = statusFail, fmt.Sprintf("%s is not writable: %v", dir, err)
		r.Fix = "check the mount (read-only?) and the directory's owner"
		return r
	}
	r.Status, r.Summary = statusOK, dir+" is private and writable"
	return r
}
