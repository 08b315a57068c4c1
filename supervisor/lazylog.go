package supervisor

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// lazyLogger is a store's logger, made the first time the store has
// something to say: slog's With copies the handler and its attributes,
// which at 10,000 mostly silent stores was megabytes for nothing. Safe for
// concurrent use.
type lazyLogger struct {
	base           *slog.Logger
	store, profile string
	l              atomic.Pointer[slog.Logger]
}

func (z *lazyLogger) get() *slog.Logger {
	if l := z.l.Load(); l != nil {
		return l
	}
	l := z.make()
	if z.l.CompareAndSwap(nil, l) {
		return l
	}
	return z.l.Load()
}

// Debug asks the base logger first: most debug lines are dropped by the
// level, and a dropped line need not make the store's logger. Nor is one
// kept for debug lines (every store says one at its first check): only a
// store with something to say at info or above keeps its logger.
func (z *lazyLogger) Debug(msg string, args ...any) {
	if l := z.l.Load(); l != nil {
		l.Debug(msg, args...)
		return
	}
	if !z.base.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	z.make().Debug(msg, args...)
}

func (z *lazyLogger) make() *slog.Logger {
	return z.base.With("subsystem", "supervisor", "store", z.store, "profile", z.profile)
}

func (z *lazyLogger) Info(msg string, args ...any)  { z.get().Info(msg, args...) }
func (z *lazyLogger) Warn(msg string, args ...any)  { z.get().Warn(msg, args...) }
func (z *lazyLogger) Error(msg string, args ...any) { z.get().Error(msg, args...) }
