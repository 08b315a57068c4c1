package service

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/store"
)

// SpecOptions say which service to describe. The zero value describes the
// host's native system-wide service with the default configuration.
type SpecOptions struct {
	Kind  ManagerKind // "" means NativeKind()
	Scope Scope
	// Config is the loaded configuration (nil: the defaults) and
	// ConfigPath the file agentd will read it from ("": the default path
	// for the scope).
	Config     *Config
	ConfigPath string
	// Executable is agentd's path; "" means this program.
	Executable string
	Getenv     func(string) string // default os.Getenv
	// Discover says where Hermes homes are looked for, to make them
	// writable in the system unit. The config's homes and stores are
	// added to it.
	Discover store.DiscoverOptions
}

// BuildSpec resolves everything the unit or plist names. Homes it cannot
// look at come back as problems: the service still installs, but those
// homes are not in ReadWritePaths.
func BuildSpec(o SpecOptions) (Spec, []store.Problem, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	kind := o.Kind
	if kind == "" {
		kind = NativeKind()
	}
	if kind == "" {
		return Spec{}, nil, fmt.Errorf("no supported service manager on this OS (systemd or launchd): run `agentd run` from your init system")
	}
	cfg := o.Config
	if cfg == nil {
		cfg = &Config{}
		cfg.ApplyDefaults()
	}
	exe, err := executable(o.Executable)
	if err != nil {
		return Spec{}, nil, err
	}
	cfgPath := o.ConfigPath
	if cfgPath == "" {
		cfgPath = DefaultConfigPath(getenv, scopeEuid(o.Scope))
		if cfgPath == "" {
			return Spec{}, nil, fmt.Errorf("no default config path: set HOME or XDG_CONFIG_HOME, or pass --config")
		}
	}
	if cfgPath, err = filepath.Abs(cfgPath); err != nil {
		return Spec{}, nil, fmt.Errorf("config path %s: %w", o.ConfigPath, err)
	}
	spec := Spec{Kind: kind, Scope: o.Scope, Executable: exe, ConfigPath: cfgPath}

	var problems []store.Problem
	if kind == Systemd && o.Scope == SystemScope {
		spec.ReadWritePaths, problems = writablePaths(cfg, getenv, o.Discover)
	}
	if kind == Launchd {
		if spec.LogPath, err = launchdLogPath(o.Scope, getenv); err != nil {
			return Spec{}, nil, err
		}
	}
	return spec, problems, nil
}

// scopeEuid is the euid whose defaults a scope uses: root's for the
// system service, the caller's for a user service.
func scopeEuid(s Scope) int {
	if s == SystemScope {
		return 0
	}
	return os.Geteuid()
}

func executable(p string) (string, error) {
	if p == "" {
		var err error
		if p, err = os.Executable(); err != nil {
			return "", fmt.Errorf("find agentd's own path: %w (pass the path explicitly)", err)
		}
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("executable %s: %w", p, err)
	}
	// The service manager must start the binary, not whatever a symlink
	// (an old version in a package manager's tree) points at later.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return abs, nil
}

// writablePaths lists what the system unit must be able to write besides
// its StateDirectory and RuntimeDirectory: every Hermes home (captures and
// diverted rows go next to the stores, replays write into them), the
// directories of configured stores, and state_dir or the socket's
// directory when the config moves them away from the defaults.
//
// Homes get a "-" prefix: a home removed after install must not keep the
// agent from starting. A moved state or socket directory does not, since
// the agent cannot run without it; Install creates it.
func writablePaths(cfg *Config, getenv func(string) string, d store.DiscoverOptions) ([]string, []store.Problem) {
	d.ExtraHomes = append(append([]string(nil), d.ExtraHomes...), cfg.Homes...)
	if d.Getenv == nil {
		d.Getenv = getenv
	}
	if cfg.DiscoverUsers != nil && !*cfg.DiscoverUsers {
		d.CurrentUserOnly = true
	} else if !d.CurrentUserOnly {
		// The service runs as root and scans every user's home, whoever
		// runs install --print.
		d.AllUsers = true
	}
	homes, problems := store.DiscoverHomes(d)
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[strings.TrimPrefix(p, "-")] {
			seen[strings.TrimPrefix(p, "-")] = true
			out = append(out, p)
		}
	}
	var dirs []string
	for _, h := range homes {
		dirs = append(dirs, h.Root)
	}
	for _, s := range cfg.Stores {
		dir := filepath.Dir(s.Path)
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		add("-" + d)
	}
	for _, p := range ownDirs(cfg, getenv) {
		add(p)
	}
	return out, problems
}

// ownDirs are the state and socket directories the config moved away
// from the system unit's StateDirectory and RuntimeDirectory.
func ownDirs(cfg *Config, getenv func(string) string) []string {
	var out []string
	if cfg.StateDir != "" && filepath.Clean(cfg.StateDir) != control.DefaultStateDir(getenv, 0) {
		out = append(out, filepath.Clean(cfg.StateDir))
	}
	if cfg.Socket != "" {
		if dir := filepath.Dir(cfg.Socket); dir != control.DefaultRuntimeDir(getenv, 0) {
			out = append(out, dir)
		}
	}
	return out
}

func launchdLogPath(s Scope, getenv func(string) string) (string, error) {
	if s == SystemScope {
		return "/var/log/stateguard-agentd.log", nil
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", fmt.Errorf("no home directory for the LaunchAgent's log: set HOME")
	}
	return filepath.Join(home, "Library", "Logs", "stateguard-agentd.log"), nil
}
