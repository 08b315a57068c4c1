package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

// serviceDeps is what the service verbs touch outside the process, so
// tests can point them at a temporary directory and a recording runner.
type serviceDeps struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	geteuid        func() int
	executable     string // "" means this program
	discover       store.DiscoverOptions
	host           service.HostFiles
	detect         func() (service.ManagerKind, error)
	// manager returns the Manager for a scope; kind is "" unless the
	// operator named one.
	manager func(kind service.ManagerKind, scope service.Scope) *service.Manager
}

func defaultServiceDeps() serviceDeps {
	return serviceDeps{
		stdout: termOut, stderr: termErr, getenv: os.Getenv, geteuid: os.Geteuid, detect: service.Detect,
		manager: func(kind service.ManagerKind, scope service.Scope) *service.Manager {
			return &service.Manager{Kind: kind, Scope: scope}
		},
	}
}

func (d serviceDeps) fail(format string, args ...any) int {
	fmt.Fprintf(d.stderr, "agentd: "+format+"\n", args...)
	return 1
}

// scopeFlag registers --user on fs.
func scopeFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("user", false, "the per-user service (systemd user unit, launchd LaunchAgent) instead of the system-wide one")
}

func scopeOf(user bool) service.Scope {
	if user {
		return service.UserScope
	}
	return service.SystemScope
}

func userHint(s service.Scope) string {
	if s == service.UserScope {
		return " --user"
	}
	return ""
}

func cmdInstall(ctx context.Context, args []string, d serviceDeps) int {
	fs := flag.NewFlagSet("agentd install", flag.ContinueOnError)
	fs.SetOutput(d.stderr)
	user := scopeFlag(fs)
	configPath := fs.String("config", "", "config file the service runs with (default "+service.SystemConfigPath+", or $XDG_CONFIG_HOME/stateguard/agent.toml with --user)")
	print := fs.Bool("print", false, "write the unit or plist to stdout instead of installing it")
	force := fs.Bool("force", false, "replace an installed unit or plist (after moving agentd or its config)")
	refresh := fs.Bool("refresh", false, "rewrite only the system unit's homes drop-in ("+service.HomesDropIn+") from the password database and the config; for a packaged unit too")
	manager := fs.String("manager", "", "systemd or launchd (default: the one running this host; with --print, this OS's)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(d.stderr, "agentd install: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	scope := scopeOf(*user)
	kind := service.ManagerKind(*manager)
	if kind != "" && kind != service.Systemd && kind != service.Launchd {
		fmt.Fprintf(d.stderr, "agentd install: --manager %q: want systemd or launchd\n", *manager)
		return 2
	}

	explicit := *configPath != ""
	path := *configPath
	if !explicit {
		euid := 0
		if scope == service.UserScope {
			euid = d.geteuid()
		}
		path = service.DefaultConfigPath(d.getenv, euid)
	}
	cfg, err := service.Load(path, explicit)
	if err != nil {
		return d.fail("%v", err)
	}

	if kind == "" {
		if *print {
			kind = service.NativeKind()
		} else if kind, err = d.detect(); err != nil {
			return d.fail("%v", err)
		}
	}
	spec, problems, err := service.BuildSpec(service.SpecOptions{
		Kind: kind, Scope: scope, Config: cfg, ConfigPath: path,
		Executable: d.executable, Getenv: d.getenv, Discover: d.discover, Host: d.host,
	})
	if err != nil {
		return d.fail("%v", err)
	}
	for _, p := range problems {
		fmt.Fprintf(d.stderr, "agentd install: note: %v\n", p)
	}
	if *refresh {
		return installRefresh(ctx, d, cfg, spec, *print)
	}
	unit, err := spec.Render()
	if err != nil {
		return d.fail("%v", err)
	}
	if *print {
		if _, err := d.stdout.Write(unit); err != nil {
			return d.fail("write unit: %v", err)
		}
		return 0
	}
	return installUnit(ctx, d, cfg, spec, unit, !explicit, *force)
}

// installUnit writes the unit or plist, and the default config when the
// operator named none and there is none yet.
func installUnit(ctx context.Context, d serviceDeps, cfg *service.Config, spec service.Spec, unit []byte, defaultConfig, force bool) int {
	kind, scope := spec.Kind, spec.Scope
	if scope == service.SystemScope && d.geteuid() != 0 {
		return d.fail("installing the system-wide service needs root: run `sudo agentd install`, or `agentd install --user` for your own stores")
	}
	if kind == service.Systemd && scope == service.SystemScope && underTmp(spec.Executable) {
		return d.fail("%s is under a temporary directory, which the unit hides (PrivateTmp=yes): copy agentd to /usr/local/bin and install from there", spec.Executable)
	}
	if defaultConfig {
		created, err := service.EnsureConfig(spec.ConfigPath)
		if err != nil {
			return d.fail("%v", err)
		}
		if created {
			fmt.Fprintf(d.stdout, "wrote %s (defaults; edit it and `agentd restart%s`)\n", spec.ConfigPath, userHint(scope))
		}
	}
	if scope == service.SystemScope {
		if err := service.PrepareDirs(cfg); err != nil {
			return d.fail("%v", err)
		}
	}
	installed, err := d.manager(kind, scope).Install(ctx, unit, service.InstallOptions{Force: force})
	if err != nil {
		return d.fail("install: %v", err)
	}
	fmt.Fprintf(d.stdout, "installed %s (%s, %s); start it with `agentd start%s`\n", installed, kind, scope, userHint(scope))
	if len(spec.ReadWritePaths) > 0 {
		fmt.Fprintf(d.stdout, "writable for the service: %s\n", strings.Join(spec.ReadWritePaths, " "))
	}
	return 0
}

// installRefresh writes the homes drop-in: what `agentd install` would
// make writable today, added to the installed unit without replacing it.
func installRefresh(ctx context.Context, d serviceDeps, cfg *service.Config, spec service.Spec, print bool) int {
	dropIn, err := spec.RenderHomesDropIn()
	if err != nil {
		return d.fail("install --refresh: %v", err)
	}
	if print {
		if _, err := d.stdout.Write(dropIn); err != nil {
			return d.fail("write drop-in: %v", err)
		}
		return 0
	}
	if d.geteuid() != 0 {
		return d.fail("install --refresh writes into /etc/systemd/system: run it as root (sudo agentd install --refresh)")
	}
	if err := service.PrepareDirs(cfg); err != nil {
		return d.fail("%v", err)
	}
	path, err := d.manager(spec.Kind, spec.Scope).WriteHomesDropIn(ctx, dropIn)
	if err != nil {
		return d.fail("install --refresh: %v", err)
	}
	fmt.Fprintf(d.stdout, "wrote %s; writable for the service: %s\n", path, strings.Join(spec.ReadWritePaths, " "))
	fmt.Fprintln(d.stdout, "the paths apply when agentd starts: `agentd restart` (nothing is watched for the second it takes)")
	return 0
}

func underTmp(p string) bool {
	for _, t := range []string{"/tmp", "/var/tmp"} {
		if rel, err := filepath.Rel(t, p); err == nil && !strings.HasPrefix(rel, "..") {
			return true
		}
	}
	return false
}

// controlVerb is start, stop and restart: one call on the Manager.
func controlVerb(ctx context.Context, name string, args []string, d serviceDeps, call func(*service.Manager, context.Context) error) int {
	fs := flag.NewFlagSet("agentd "+name, flag.ContinueOnError)
	fs.SetOutput(d.stderr)
	user := scopeFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(d.stderr, "agentd %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	m := d.manager("", scopeOf(*user))
	if err := call(m, ctx); err != nil {
		return d.fail("%s: %v", name, err)
	}
	return 0
}
