package service

import (
	"bytes"
	"embed"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// ManagerKind names a service manager agentd can install itself into.
type ManagerKind string

const (
	Systemd ManagerKind = "systemd"
	Launchd ManagerKind = "launchd"
)

// Scope says whether agentd runs system-wide (root; systemd system unit,
// launchd LaunchDaemon) or for the calling user (systemd user unit, launchd
// LaunchAgent).
type Scope int

const (
	SystemScope Scope = iota
	UserScope
)

func (s Scope) String() string {
	if s == UserScope {
		return "user"
	}
	return "system"
}

// Names the service is installed under.
const (
	UnitName     = "stateguard-agentd.service"
	LaunchdLabel = "com.github.stateguard.agentd"
)

// Capabilities is what the system unit grants agentd, and nothing else:
// reading other users' /proc/<pid>/fd (SYS_PTRACE, DAC_READ_SEARCH),
// signalling their processes (KILL), and handing captures to the
// profile's owner (CHOWN, FOWNER), and writing into a user's directory as
// that user (SETUID, SETGID: a per-thread setfsuid/setfsgid, see
// store.AsOwner), so the kernel checks every write there with the owner's
// rights. CAP_DAC_OVERRIDE is deliberately absent (writes as root would
// then pass any permission check), and CAP_SYS_ADMIN too, so a holder that
// has a store only mmapped (no fd) cannot be pinned through
// /proc/<pid>/map_files.
var Capabilities = []string{"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_CHOWN", "CAP_FOWNER", "CAP_SETUID", "CAP_SETGID"}

//go:embed templates/agentd.service templates/agentd.plist
var templateFS embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"xml": xmlText,
}).ParseFS(templateFS, "templates/agentd.*"))

// DefaultConfigFile is the commented config `agentd install` writes when
// there is none, and the one the packages ship as /etc/stateguard/agent.toml:
// every key, commented out at its default, so as written it changes
// nothing.
//
//go:embed templates/agent.toml
var DefaultConfigFile []byte

// Spec is everything a unit or plist says. BuildSpec fills it from the
// configuration and the homes found on the host.
type Spec struct {
	Kind  ManagerKind
	Scope Scope
	// Executable is the absolute path of agentd; ConfigPath the absolute
	// path passed to `agentd run --config`.
	Executable string
	ConfigPath string
	// ReadWritePaths are the directories the system unit may write to
	// under ProtectSystem=strict, besides its StateDirectory and
	// RuntimeDirectory. A leading "-" means "skip it if it is missing".
	ReadWritePaths []string
	// LogPath is where launchd sends agentd's stdout and stderr.
	LogPath string
	// Packaged marks the system unit the .deb and .rpm ship (PackageSpec):
	// only its header comment differs.
	Packaged bool
}

// Where the packages install things.
const (
	PackageExecutable = "/usr/bin/agentd"
	// PackageUnitDir is where the packages put the system unit (Debian
	// with merged /usr and RPM distributions alike); a unit in
	// /etc/systemd/system (UnitPath, what `agentd install` writes)
	// overrides it.
	PackageUnitDir = "/usr/lib/systemd/system"
)

// PackageReadWritePaths are the system unit's writable directories when
// it is built without looking at a host: the parents where Hermes homes
// live (~/.hermes of every user, root's). A package cannot know the homes
// of the host it lands on, and a home added later must not need a
// reinstall; without CAP_DAC_OVERRIDE the agent still writes only where
// file permissions let root write. Homes elsewhere: `agentd install`
// writes a host-specific unit into /etc/systemd/system, which overrides
// the packaged one.
var PackageReadWritePaths = []string{"-/home", "-/root"}

// PackageSpec is the system-wide systemd unit the packages ship.
func PackageSpec() Spec {
	return Spec{
		Kind: Systemd, Scope: SystemScope, Executable: PackageExecutable, ConfigPath: SystemConfigPath,
		ReadWritePaths: append([]string(nil), PackageReadWritePaths...), Packaged: true,
	}
}

// WatchdogTimeout is how long the service manager waits for a sign that
// agentd's incident path still turns before it restarts agentd: systemd's
// WatchdogSec=, and under launchd (which has no watchdog protocol)
// agentd's own --watchdog, after which it exits for KeepAlive to restart
// it. Long enough for a capture of a big store (a step may take half of
// it), short enough that a wedged agent is not mistaken for a quiet one
// for long.
const WatchdogTimeout = 2 * time.Minute

// Args is the command line the service manager starts.
func (s Spec) Args() []string {
	args := []string{s.Executable, "run", "--config", s.ConfigPath}
	if s.Kind == Launchd {
		args = append(args, "--watchdog", WatchdogTimeout.String())
	}
	return args
}

// Render returns the systemd unit or the launchd plist.
func (s Spec) Render() ([]byte, error) {
	if len(s.Executable) == 0 || s.Executable[0] != '/' || s.ConfigPath == "" || s.ConfigPath[0] != '/' {
		return nil, fmt.Errorf("render %s service: executable %q and config %q must be absolute paths", s.Kind, s.Executable, s.ConfigPath)
	}
	switch s.Kind {
	case Systemd:
		return s.renderSystemd()
	case Launchd:
		return s.renderLaunchd()
	}
	return nil, fmt.Errorf("render service: unknown service manager %q (systemd or launchd)", s.Kind)
}

func (s Spec) renderSystemd() ([]byte, error) {
	var words []string
	for _, a := range s.Args() {
		w, err := systemdWord(a, true)
		if err != nil {
			return nil, fmt.Errorf("render systemd unit: ExecStart: %w", err)
		}
		words = append(words, w)
	}
	var rw []string
	if s.Scope == SystemScope {
		for _, p := range s.ReadWritePaths {
			prefix := ""
			if strings.HasPrefix(p, "-") {
				prefix, p = "-", p[1:]
			}
			w, err := systemdWord(p, false)
			if err != nil {
				return nil, fmt.Errorf("render systemd unit: ReadWritePaths: %w", err)
			}
			rw = append(rw, prefix+w)
		}
	}
	data := map[string]any{
		"User":               s.Scope == UserScope,
		"Packaged":           s.Packaged && s.Scope == SystemScope,
		"ExecStart":          strings.Join(words, " "),
		"ReadWritePaths":     rw,
		"Capabilities":       strings.Join(Capabilities, " "),
		"RestartSec":         "2s",
		"TimeoutStartSec":    "5min",
		"WatchdogSec":        fmt.Sprintf("%dmin", int(WatchdogTimeout/time.Minute)),
		"StartLimitInterval": "120s",
		"StartLimitBurst":    5,
	}
	return execute("agentd.service", data)
}

func (s Spec) renderLaunchd() ([]byte, error) {
	if s.LogPath == "" {
		return nil, errors.New("render launchd plist: no log path")
	}
	data := map[string]any{
		"User":             s.Scope == UserScope,
		"Label":            LaunchdLabel,
		"Args":             s.Args(),
		"LogPath":          s.LogPath,
		"ThrottleInterval": 5,
	}
	return execute("agentd.plist", data)
}

func execute(name string, data map[string]any) ([]byte, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// systemdWord quotes one word of a unit file value: % starts a specifier
// everywhere, $ a variable in command lines, and whitespace, quotes and
// backslashes need C-style quoting. A newline cannot be expressed at all.
func systemdWord(s string, command bool) (string, error) {
	if s == "" || strings.ContainsAny(s, "\n\r\x00") {
		return "", fmt.Errorf("%q cannot be written into a unit file (empty, or has a newline or NUL)", s)
	}
	var b strings.Builder
	quote := false
	for _, r := range s {
		switch r {
		case '%':
			b.WriteString("%%")
		case '$':
			if command {
				b.WriteString("$$")
			} else {
				b.WriteRune(r)
			}
		case '\\', '"':
			b.WriteRune('\\')
			b.WriteRune(r)
			quote = true
		case ' ', '\t', '\'', ';':
			b.WriteRune(r)
			quote = true
		default:
			b.WriteRune(r)
		}
	}
	if quote {
		return `"` + b.String() + `"`, nil
	}
	return b.String(), nil
}

func xmlText(s string) (string, error) {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "", err
	}
	return b.String(), nil
}
