package supervisor

import "github.com/stateguard/stateguard/store"

// guardSync arms, re-arms or disarms the store's guard for generation gen.
// It runs on the worker after every check.
func (w *worker) guardSync(gen store.Generation) {}

// guardClose releases the store's guard when its worker stops.
func (w *worker) guardClose() {}
