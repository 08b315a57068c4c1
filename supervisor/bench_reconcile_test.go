package supervisor

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// BenchmarkReconcileIdle is one reconcile of an agent on 2,000 idle
// stores: the cost an idle store adds every interval.
//
//	go test ./supervisor/ -run '^$' -bench ReconcileIdle -benchtime 20x
func BenchmarkReconcileIdle(b *testing.B) {
	home := scaleHomeB(b, 2000)
	a := startAgent(b, home, func(o *Options) { o.Reconcile, o.Guard = time.Hour, true })
	a.reconcile()
	b.ResetTimer()
	for range b.N {
		a.reconcile()
	}
}

// BenchmarkStartStores is Start on a home of 2,000 stores, to the point
// where it returns (agent.started).
//
//	go test ./supervisor/ -run '^$' -bench StartStores -benchtime 3x
func BenchmarkStartStores(b *testing.B) {
	home := scaleHomeB(b, 2000)
	for range b.N {
		b.StopTimer()
		env := hermestest.NewAgentEnv(b, home)
		o := Options{StateDir: env.StateDir, Socket: env.Socket, Reconcile: time.Hour, Guard: true,
			Discover: store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true},
			Logger:   slog.New(slog.DiscardHandler)}
		b.StartTimer()
		a, err := Start(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := a.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
