package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	kservice "github.com/kardianos/service"

	"github.com/stateguard/stateguard/control"
)

// ErrNotInstalled is returned by the verbs that need an installed service.
var ErrNotInstalled = errors.New("agentd is not installed as a service")

// ErrNoManager is returned by Detect on a host without systemd or launchd.
var ErrNoManager = errors.New("no supported service manager")

// Runner runs one service-manager command (systemctl, launchctl) and
// returns its combined output. A command that ran and exited non-zero is a
// *CommandError, so callers can tell "not loaded" from "could not run".
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// CommandError is a command that exited with a non-zero status.
type CommandError struct {
	Argv   []string
	Code   int
	Output string
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s: exit status %d", strings.Join(e.Argv, " "), e.Code)
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += ": " + out
	}
	return msg
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, &CommandError{Argv: append([]string{name}, args...), Code: ee.ExitCode(), Output: string(out)}
	}
	if err != nil {
		return out, fmt.Errorf("run %s: %w", name, err)
	}
	return out, nil
}

// Detect reports the service manager that runs this host, as
// kardianos/service detects it (systemd as PID 1, or launchd).
func Detect() (ManagerKind, error) {
	name := "none"
	if sys := kservice.ChosenSystem(); sys != nil {
		name = sys.String()
	}
	switch name {
	case "linux-systemd":
		return Systemd, nil
	case "darwin-launchd":
		return Launchd, nil
	}
	return "", fmt.Errorf("%w here (kardianos/service detected %s): agentd installs into systemd or launchd; start `agentd run` from your init system instead, or use --print to see the unit", ErrNoManager, name)
}

// Status is what the service manager says about agentd.
type Status struct {
	Kind      ManagerKind `json:"manager"`
	Scope     string      `json:"scope"`
	Path      string      `json:"path"` // the unit or plist
	Installed bool        `json:"installed"`
	Running   bool        `json:"running"`
	PID       int         `json:"pid,omitempty"`
	// State is the manager's own word for it: systemd's
	// ActiveState/SubState, launchd's state.
	State string `json:"state"`
}

// Manager installs and controls agentd in one service manager and scope.
// The zero value manages the system-wide service of the detected manager
// and runs real commands.
type Manager struct {
	Kind   ManagerKind // "" means Detect()
	Scope  Scope
	Runner Runner // default ExecRunner
	// Dir overrides the directory the unit or plist is written to.
	Dir string
	// PackageDir is where a system unit shipped by a package is looked
	// for when none is at Path: "" means PackageUnitDir, unless Dir is
	// set (a test's directory then stands alone).
	PackageDir string
	Getenv     func(string) string // default os.Getenv
	Geteuid    func() int          // default os.Geteuid
}

func (m *Manager) kind() (ManagerKind, error) {
	if m.Kind != "" {
		return m.Kind, nil
	}
	return Detect()
}

func (m *Manager) runner() Runner {
	if m.Runner == nil {
		return ExecRunner{}
	}
	return m.Runner
}

func (m *Manager) getenv(k string) string {
	if m.Getenv == nil {
		return os.Getenv(k)
	}
	return m.Getenv(k)
}

func (m *Manager) euid() int {
	if m.Geteuid == nil {
		return os.Geteuid()
	}
	return m.Geteuid()
}

// Path is where the unit or plist is (or would be) installed.
func (m *Manager) Path() (string, error) {
	kind, err := m.kind()
	if err != nil {
		return "", err
	}
	if m.Dir != "" {
		return filepath.Join(m.Dir, fileName(kind)), nil
	}
	return UnitPath(kind, m.Scope, m.getenv)
}

func fileName(k ManagerKind) string {
	if k == Launchd {
		return LaunchdLabel + ".plist"
	}
	return UnitName
}

// UnitPath is where the unit (systemd) or plist (launchd) of a scope
// lives: /etc/systemd/system, $XDG_CONFIG_HOME/systemd/user,
// /Library/LaunchDaemons, ~/Library/LaunchAgents.
func UnitPath(kind ManagerKind, scope Scope, getenv func(string) string) (string, error) {
	home := getenv("HOME")
	switch {
	case kind == Systemd && scope == SystemScope:
		return filepath.Join("/etc/systemd/system", UnitName), nil
	case kind == Systemd:
		if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
			return filepath.Join(x, "systemd", "user", UnitName), nil
		}
		if filepath.IsAbs(home) {
			return filepath.Join(home, ".config", "systemd", "user", UnitName), nil
		}
		return "", errors.New("no place for the systemd user unit: set HOME or XDG_CONFIG_HOME")
	case kind == Launchd && scope == SystemScope:
		return filepath.Join("/Library/LaunchDaemons", LaunchdLabel+".plist"), nil
	case kind == Launchd:
		if filepath.IsAbs(home) {
			return filepath.Join(home, "Library", "LaunchAgents", LaunchdLabel+".plist"), nil
		}
		return "", errors.New("no place for the LaunchAgent: set HOME")
	}
	return "", fmt.Errorf("unknown service manager %q", kind)
}

// backend is one service manager's commands.
type backend interface {
	install(ctx context.Context) error   // after the file is written
	uninstall(ctx context.Context) error // before the file is removed
	postUninstall(ctx context.Context) error
	start(ctx context.Context) error
	stop(ctx context.Context) error
	restart(ctx context.Context) error
	status(ctx context.Context, st *Status) error
}

func (m *Manager) backend() (backend, string, error) {
	kind, err := m.kind()
	if err != nil {
		return nil, "", err
	}
	path, err := m.Path()
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case Systemd:
		return &systemd{run: m.runner(), user: m.Scope == UserScope}, path, nil
	case Launchd:
		return &launchd{run: m.runner(), domain: launchdDomain(m.Scope, m.euid()), plist: path}, path, nil
	}
	return nil, "", fmt.Errorf("unknown service manager %q", kind)
}

// InstallOptions tune Install.
type InstallOptions struct {
	// Force replaces an installed unit or plist (after adding a home, or
	// moving the binary).
	Force bool
}

// Install writes the rendered unit or plist and registers it so it starts
// at boot (systemctl enable, launchctl enable). It does not start it.
func (m *Manager) Install(ctx context.Context, content []byte, o InstallOptions) (string, error) {
	b, path, err := m.backend()
	if err != nil {
		return "", err
	}
	if m.Scope == UserScope && m.euid() == 0 {
		return "", errors.New("install --user as root: the user service is for an unprivileged user; install the system service instead (drop --user)")
	}
	if _, err := os.Lstat(path); err == nil && !o.Force {
		return path, fmt.Errorf("%s already exists: agentd is installed; pass --force to replace it (e.g. after adding a Hermes home), or uninstall first", path)
	}
	if err := writeFileAtomic(path, content, 0o644); err != nil {
		return path, err
	}
	if err := b.install(ctx); err != nil {
		return path, fmt.Errorf("register %s: %w", path, err)
	}
	return path, nil
}

// Uninstall stops the service, unregisters it and removes its file.
func (m *Manager) Uninstall(ctx context.Context) (string, error) {
	b, path, err := m.backend()
	if err != nil {
		return "", err
	}
	where, packaged, ok := m.installed(path)
	if !ok {
		return path, fmt.Errorf("%w: no %s", ErrNotInstalled, path)
	}
	if packaged {
		return where, fmt.Errorf("%s belongs to the stateguard package: remove the package (apt remove stateguard, dnf remove stateguard), or `systemctl disable --now %s` to keep it installed but off", where, UnitName)
	}
	if err := b.uninstall(ctx); err != nil {
		return path, err
	}
	if err := os.Remove(path); err != nil {
		return path, fmt.Errorf("remove %s: %w", path, err)
	}
	if kind, _ := m.kind(); kind == Systemd && m.Scope == SystemScope {
		if err := m.removeHomesDropIn(); err != nil {
			return path, err
		}
	}
	return path, b.postUninstall(ctx)
}

// Start starts the installed service.
func (m *Manager) Start(ctx context.Context) error { return m.control(ctx, backend.start) }

// Stop stops the service; it stays installed.
func (m *Manager) Stop(ctx context.Context) error { return m.control(ctx, backend.stop) }

// Restart stops and starts the service, or starts it if it is stopped.
func (m *Manager) Restart(ctx context.Context) error { return m.control(ctx, backend.restart) }

func (m *Manager) control(ctx context.Context, verb func(backend, context.Context) error) error {
	b, path, err := m.backend()
	if err != nil {
		return err
	}
	if _, _, ok := m.installed(path); !ok {
		return fmt.Errorf("%w: no %s (run `agentd install` first, or install the stateguard package)", ErrNotInstalled, path)
	}
	return verb(b, ctx)
}

// installed finds the unit or plist in effect: the one at path (what
// Install writes), else, for the system-wide systemd service, the unit a
// package shipped (which a unit at path overrides).
func (m *Manager) installed(path string) (where string, packaged, ok bool) {
	if _, err := os.Lstat(path); err == nil {
		return path, false, true
	}
	kind, _ := m.kind()
	dir := m.PackageDir
	if dir == "" && m.Dir == "" {
		dir = PackageUnitDir
	}
	if kind == Systemd && m.Scope == SystemScope && dir != "" {
		p := filepath.Join(dir, UnitName)
		if _, err := os.Lstat(p); err == nil {
			return p, true, true
		}
	}
	return path, false, false
}

// Status asks the service manager about agentd. A service that is not
// installed is not an error: Installed is false.
func (m *Manager) Status(ctx context.Context) (Status, error) {
	b, path, err := m.backend()
	if err != nil {
		return Status{}, err
	}
	kind, _ := m.kind()
	where, _, ok := m.installed(path)
	st := Status{Kind: kind, Scope: m.Scope.String(), Path: where, Installed: ok}
	if err := b.status(ctx, &st); err != nil {
		return st, err
	}
	return st, nil
}

// writeFileAtomic replaces path with data: a temp file in the same
// directory, fsynced, then renamed, so the service manager never reads a
// half-written unit.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// EnsureConfig creates the commented default config file
// (DefaultConfigFile) at path when none exists, because the unit passes --config and `agentd run` refuses a
// named file that is missing. It never touches an existing file.
func EnsureConfig(path string) (created bool, err error) {
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("create config directory %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644) // O_EXCL: never through a symlink
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create config %s: %w", path, err)
	}
	_, werr := f.Write(DefaultConfigFile)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return false, fmt.Errorf("write config %s: %w", path, werr)
	}
	return true, nil
}

// PrepareDirs creates the state and socket directories a config moves
// away from the system unit's StateDirectory and RuntimeDirectory: under
// ProtectSystem=strict the agent could not create them itself.
func PrepareDirs(cfg *Config) error {
	if cfg.StateDir != "" {
		if err := control.PrepareStateDir(filepath.Clean(cfg.StateDir)); err != nil {
			return err
		}
	}
	if cfg.Socket != "" {
		dir := filepath.Dir(cfg.Socket)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create socket directory %s: %w", dir, err)
		}
	}
	return nil
}
