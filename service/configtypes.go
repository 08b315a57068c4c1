package service

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stateguard/stateguard/incident"
)

// Duration is a TOML string such as "10s" or "15m". It remembers whether it
// was set, so an explicit "0s" (which disables the stall watch) differs
// from an absent key.
type Duration struct {
	D   time.Duration
	set bool
}

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: 500ms, 10s, 15m)", b)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", b)
	}
	d.D, d.set = v, true
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.D.String()), nil }

// ByteSize is a byte count: an integer, or a string with a unit
// ("512MiB", "2GB").
type ByteSize int64

func (s *ByteSize) UnmarshalText(b []byte) error {
	str := strings.TrimSpace(string(b))
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(str, u.suffix) {
			str, mult = strings.TrimSpace(strings.TrimSuffix(str, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(str, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a size (examples: 0, 512MiB, 2GB)", b)
	}
	if n > math.MaxInt64/mult {
		return fmt.Errorf("%q is more than 8 EiB", b)
	}
	*s = ByteSize(n * mult)
	return nil
}

// Policy is a release policy; the supervisor owns its names.
type Policy = incident.Policy

const (
	PolicyTerminate = incident.PolicyTerminate
	PolicyKill      = incident.PolicyKill
	PolicyResume    = incident.PolicyResume
	PolicyHold      = incident.PolicyHold
	PolicyObserve   = incident.PolicyObserve
)

// LogFormat selects the log handler.
type LogFormat string

const (
	LogAuto    LogFormat = "auto"
	LogJSON    LogFormat = "json"
	LogText    LogFormat = "text"
	LogJournal LogFormat = "journal" // systemd's native journal protocol
)

func (f *LogFormat) UnmarshalText(b []byte) error {
	switch v := LogFormat(b); v {
	case LogAuto, LogJSON, LogText, LogJournal:
		*f = v
		return nil
	}
	return fmt.Errorf("%q is not a log format (auto, json, text, journal)", b)
}

// LogLevel is a slog level name.
type LogLevel string

func (l *LogLevel) UnmarshalText(b []byte) error {
	var v slog.Level
	if err := v.UnmarshalText(b); err != nil {
		return fmt.Errorf("%q is not a log level (debug, info, warn, error)", b)
	}
	*l = LogLevel(strings.ToLower(string(b)))
	return nil
}

// Level returns the slog level (info when unset).
func (l LogLevel) Level() slog.Level {
	var v slog.Level
	if err := v.UnmarshalText([]byte(l)); err != nil {
		return slog.LevelInfo
	}
	return v
}

// StoreKind says how an explicitly configured store is treated.
type StoreKind string

const (
	KindAuto    StoreKind = "auto" // Hermes when the schema probe says so
	KindHermes  StoreKind = "hermes"
	KindGeneric StoreKind = "generic"
)

func (k *StoreKind) UnmarshalText(b []byte) error {
	switch v := StoreKind(b); v {
	case KindAuto, KindHermes, KindGeneric:
		*k = v
		return nil
	}
	return fmt.Errorf("%q is not a store kind (auto, hermes, generic)", b)
}
