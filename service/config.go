package service

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/watcher"
)

// Config is agentd's configuration file. Its zero value, after
// ApplyDefaults, is the configuration agentd runs with when no file exists,
// so the quick start needs none.
type Config struct {
	StateDir      string       `toml:"state_dir"`
	Socket        string       `toml:"socket"`
	Reconcile     Duration     `toml:"reconcile"`
	Guard         *bool        `toml:"guard"`
	Verdict       holders.Rule `toml:"verdict"`
	Exclude       []string     `toml:"exclude"`
	Homes         []string     `toml:"homes"`
	DiscoverUsers *bool        `toml:"discover_users"`
	// MaxProfilesPerHome bounds the named profiles watched per home (0:
	// the default, store.DefaultMaxProfiles).
	MaxProfilesPerHome int           `toml:"max_profiles_per_home"`
	Log                LogConfig     `toml:"log"`
	Policy             PolicyConfig  `toml:"policy"`
	Capture            CaptureConfig `toml:"capture"`
	Alert              AlertConfig   `toml:"alert"`
	Metrics            MetricsConfig `toml:"metrics"`
	Stall              StallConfig   `toml:"stall"`
	Stores             []StoreConfig `toml:"store"`

	// Path is the file the config was read from; empty for defaults.
	Path string `toml:"-"`
}

// LogConfig selects the slog handler.
type LogConfig struct {
	Format LogFormat `toml:"format"` // auto (journal under systemd, text on a terminal, else JSON), json, text, journal
	Level  LogLevel  `toml:"level"`
}

// PolicyConfig is the release policy per incident kind.
type PolicyConfig struct {
	Replaced    Policy   `toml:"replaced"`
	SidecarLost Policy   `toml:"sidecar_lost"`
	Mispaired   Policy   `toml:"mispaired"`
	Rewritten   Policy   `toml:"rewritten"`
	Grace       Duration `toml:"grace"`
	// FrozenLimit: how long needs_action may keep holders frozen.
	FrozenLimit Duration `toml:"frozen_limit"`
}

// CaptureConfig bounds what captures may use.
type CaptureConfig struct {
	MaxBytes ByteSize `toml:"max_bytes"` // 0: no budget beyond free space
}

// AlertConfig runs an operator command per event.
type AlertConfig struct {
	Exec        []string `toml:"exec"`
	Timeout     Duration `toml:"timeout"`
	Concurrency int      `toml:"concurrency"`
	RateLimit   Duration `toml:"rate_limit"`
}

// MetricsConfig turns on the Prometheus endpoint.
type MetricsConfig struct {
	Listen string `toml:"listen"` // empty: off; must be a loopback address
}

// StallConfig tunes the stall watch.
type StallConfig struct {
	Timeout Duration `toml:"timeout"` // 0 disables
}

// StoreConfig names one store explicitly: a generic SQLite file, or a
// Hermes store with its own guard or policy.
type StoreConfig struct {
	Path   string       `toml:"path"`
	Kind   StoreKind    `toml:"kind"`
	Guard  *bool        `toml:"guard"`
	Policy PolicyConfig `toml:"policy"`
}

// Defaults, as the README documents them. Each is defined by the package
// that uses it; these names only collect them for the config.
const (
	DefaultReconcile    = watcher.DefaultReconcile
	DefaultStallTimeout = 300 * time.Second
	SystemConfigPath    = "/etc/stateguard/agent.toml"
	userConfigRelative  = "stateguard/agent.toml"
	// DefaultVerdict: uninspectable processes of other users that hold no
	// lock on a store do not make its verdict unknown (holders.RuleLocks).
	DefaultVerdict = holders.RuleLocks
)

// DefaultConfigPath is the system file as root, else
// $XDG_CONFIG_HOME/stateguard/agent.toml.
func DefaultConfigPath(getenv func(string) string, euid int) string {
	if euid == 0 {
		return SystemConfigPath
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, userConfigRelative)
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", userConfigRelative)
	}
	return ""
}

// Load reads the config at path. When explicit is false a missing file
// means the defaults; when the operator named the file, it must exist.
func Load(path string, explicit bool) (*Config, error) {
	cfg := &Config{}
	if path == "" {
		cfg.ApplyDefaults()
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		cfg.ApplyDefaults()
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w (hint: pass an existing file with --config, or none for the defaults)", path, err)
	}
	cfg, err = Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.Path = path
	return cfg, nil
}

// Parse decodes and validates a config document. Every error names the key
// and its line.
func Parse(data []byte) (*Config, error) {
	cfg := &Config{}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(cfg)
	if err != nil {
		return nil, decodeError(data, md, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return nil, fmt.Errorf("line %d: unknown key %s (hint: see the Configuration section of the README for every key)", keyLine(data, md, k), k)
	}
	if err := cfg.validate(data, md); err != nil {
		return nil, err
	}
	cfg.ApplyDefaults()
	return cfg, nil
}

func (c *Config) validate(data []byte, md toml.MetaData) error {
	fail := func(key, format string, args ...any) error {
		return fmt.Errorf("line %d: key %s: %s", keyLine(data, md, strings.Split(key, ".")), key, fmt.Sprintf(format, args...))
	}
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		return fail("state_dir", "%q is not an absolute path", c.StateDir)
	}
	if c.Socket != "" && !filepath.IsAbs(c.Socket) {
		return fail("socket", "%q is not an absolute path", c.Socket)
	}
	if c.Reconcile.D < 0 || (c.Reconcile.D > 0 && c.Reconcile.D < 100*time.Millisecond) {
		return fail("reconcile", "%v is below the 100ms floor", c.Reconcile.D)
	}
	if c.MaxProfilesPerHome < 0 {
		return fail("max_profiles_per_home", "%d is negative (0 means the default)", c.MaxProfilesPerHome)
	}
	for _, h := range c.Homes {
		if !filepath.IsAbs(h) {
			return fail("homes", "%q is not an absolute path", h)
		}
	}
	for _, e := range c.Exclude {
		if e == "" || strings.Contains(e, "/") {
			return fail("exclude", "%q is not an executable name (no slashes)", e)
		}
	}
	if c.Alert.Concurrency < 0 {
		return fail("alert.concurrency", "must be positive")
	}
	if len(c.Alert.Exec) > 0 && !filepath.IsAbs(c.Alert.Exec[0]) {
		return fail("alert.exec", "the command %q must be an absolute path", c.Alert.Exec[0])
	}
	if c.Metrics.Listen != "" {
		host, _, err := net.SplitHostPort(c.Metrics.Listen)
		if err != nil {
			return fail("metrics.listen", "%v", err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fail("metrics.listen", "%q is not a loopback address (the endpoint is unauthenticated)", c.Metrics.Listen)
		}
	}
	seen := map[string]bool{}
	for _, s := range c.Stores {
		if s.Path == "" || !filepath.IsAbs(s.Path) {
			return fail("store.path", "%q is not an absolute path", s.Path)
		}
		if seen[s.Path] {
			return fail("store.path", "%q is listed twice", s.Path)
		}
		seen[s.Path] = true
	}
	return nil
}

// ApplyDefaults fills every unset key with its documented default.
func (c *Config) ApplyDefaults() {
	if c.Reconcile.D == 0 {
		c.Reconcile.D = DefaultReconcile
	}
	if c.MaxProfilesPerHome == 0 {
		c.MaxProfilesPerHome = store.DefaultMaxProfiles
	}
	if c.Guard == nil {
		c.Guard = ptr(true)
	}
	if c.Verdict == "" {
		c.Verdict = DefaultVerdict
	}
	if c.DiscoverUsers == nil {
		c.DiscoverUsers = ptr(true)
	}
	if c.Log.Format == "" {
		c.Log.Format = LogAuto
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	d := incident.DefaultPolicies()
	c.Policy.fill(PolicyConfig{Replaced: d.Replaced, SidecarLost: d.SidecarLost, Mispaired: d.Mispaired, Rewritten: d.Rewritten, Grace: Duration{D: d.Grace},
		FrozenLimit: Duration{D: d.FrozenLimit}})
	for i := range c.Stores {
		s := &c.Stores[i]
		if s.Kind == "" {
			s.Kind = KindAuto
		}
		s.Policy.fill(c.Policy)
	}
	if c.Alert.Timeout.D == 0 {
		c.Alert.Timeout.D = alert.DefaultTimeout
	}
	if c.Alert.Concurrency == 0 {
		c.Alert.Concurrency = alert.DefaultConcurrency
	}
	if c.Alert.RateLimit.D == 0 {
		c.Alert.RateLimit.D = alert.DefaultRateLimit
	}
	if c.Stall.Timeout.D == 0 && !c.Stall.Timeout.set {
		c.Stall.Timeout.D = DefaultStallTimeout
	}
}

func (p *PolicyConfig) fill(from PolicyConfig) {
	if p.Replaced == "" {
		p.Replaced = from.Replaced
	}
	if p.SidecarLost == "" {
		p.SidecarLost = from.SidecarLost
	}
	if p.Mispaired == "" {
		p.Mispaired = from.Mispaired
	}
	if p.Rewritten == "" {
		p.Rewritten = from.Rewritten
	}
	if p.Grace.D == 0 {
		p.Grace = from.Grace
	}
	if p.FrozenLimit.D == 0 {
		p.FrozenLimit = from.FrozenLimit
	}
}

// StoreFor returns the explicit entry for a store path, if any.
func (c *Config) StoreFor(path string) (StoreConfig, bool) {
	for _, s := range c.Stores {
		if s.Path == path {
			return s, true
		}
	}
	return StoreConfig{}, false
}

// Set is the policy config as the incident engine takes it.
func (p PolicyConfig) Set() incident.PolicySet {
	return incident.PolicySet{Replaced: p.Replaced, SidecarLost: p.SidecarLost, Mispaired: p.Mispaired, Rewritten: p.Rewritten, Grace: p.Grace.D, FrozenLimit: p.FrozenLimit.D}
}

// PolicyFor is the release policy set for the store at path: its own
// [[store]] entry's (which Load filled from [policy]) or [policy]'s.
func (c *Config) PolicyFor(path string) incident.PolicySet {
	if s, ok := c.StoreFor(path); ok {
		return s.Policy.Set()
	}
	return c.Policy.Set()
}

func ptr[T any](v T) *T { return &v }

// decodeError puts the decoder's error in the form every config error
// has, "line N: [key K: ]message". Syntax errors and values a type refused
// come as a ParseError; a value of the wrong TOML type comes as a plain
// error, `toml: line 3 (last key "guard"): incompatible types: ...`.
func decodeError(data []byte, md toml.MetaData, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		// The byte offset is the reliable part of the position: at the
		// end of the input the lexer reports the line before the error's
		// (line 0 for a one-line document).
		line := max(pe.Position.Line, 1)
		if s := pe.Position.Start; s > 0 && s <= len(data) {
			line = 1 + bytes.Count(data[:s], []byte("\n"))
		}
		if pe.LastKey != "" {
			return fmt.Errorf("line %d: key %s: %s", line, pe.LastKey, pe.Message)
		}
		return fmt.Errorf("line %d: %s", line, pe.Message)
	}
	if m := mismatchRe.FindStringSubmatch(err.Error()); m != nil {
		key, uerr := strconv.Unquote(`"` + m[2] + `"`)
		if uerr != nil {
			key = m[2]
		}
		line, _ := strconv.Atoi(m[1])
		if line == 0 {
			line = keyLine(data, md, strings.Split(key, "."))
		}
		return fmt.Errorf("line %d: key %s: %s", line, key, m[3])
	}
	// No other form is known (a long fuzz run found none); the document
	// is at least that long.
	return fmt.Errorf("line 1: %w", err)
}

var mismatchRe = regexp.MustCompile(`(?s)^toml: (?:line (\d+) )?\(last key "(.*)"\): (.*)$`)

// keyLine is the line key was written on, from the decoder's own record of
// key positions (which it exposes only in errors): the document is decoded
// again into a type whose single field sits at key and refuses any value,
// and the resulting error carries the key's position. Tables of arrays
// become slices on the way down, as in the document. A key the probe
// cannot find (absent, as a required field left out, or a name no struct
// tag can carry, such as "" or one with a comma) is reported at its table;
// a top-level one at the first line that mentions it.
func keyLine(data []byte, md toml.MetaData, key toml.Key) int {
	for k := key; len(k) > 0; k = k[:len(k)-1] {
		t := reflect.TypeOf(keyProbe{})
		for i := len(k) - 1; i >= 0; i-- {
			if i < len(k)-1 {
				if typ := md.Type(k[:i+1]...); typ == "ArrayHash" || typ == "Array" {
					t = reflect.SliceOf(t)
				}
			}
			t = reflect.StructOf([]reflect.StructField{{Name: "K", Type: t, Tag: reflect.StructTag(`toml:` + strconv.Quote(k[i]))}})
		}
		_, err := toml.NewDecoder(bytes.NewReader(data)).Decode(reflect.New(t).Interface())
		var pe toml.ParseError
		if errors.As(err, &pe) && pe.Message == errKeyProbe.Error() && pe.Position.Line > 0 {
			return pe.Position.Line
		}
	}
	if len(key) == 0 {
		return 1
	}
	return max(1, firstLineOf(data, key[0]))
}

var errKeyProbe = errors.New("stateguard key probe")

type keyProbe struct{}

func (keyProbe) UnmarshalTOML(any) error { return errKeyProbe }

// firstLineOf is the first line that mentions s; 0 if none does.
func firstLineOf(data []byte, s string) int {
	for i, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	return 0
}
