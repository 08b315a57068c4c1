package supervisor

import (
	"testing"
	"time"
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
