package service

import (
	"fmt"
	"os"
	"path/filepath"

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
	// Host names the files that say where users' homes are created.
	Host HostFiles
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
		spec.ReadWritePaths, problems = WritablePaths(cfg, getenv, o.Discover, o.Host)
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
