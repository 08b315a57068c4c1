package recovery

import (
	"errors"
	"fmt"

	"github.com/stateguard/stateguard/store"
)

// closeWritable closes w and adds its error to *err, for a deferred close
// after writes: Close's final checkpoint is the only one that copies
// what was committed into the main file, and when it is refused
// (store.ErrCheckpointIncomplete) the caller must hear it, never get a
// clean return. what names the committed work for the message.
func closeWritable(w *store.Writable, what string, err *error) {
	cerr := w.Close()
	if cerr == nil {
		return
	}
	if errors.Is(cerr, store.ErrCheckpointIncomplete) {
		cerr = fmt.Errorf("%s is committed, but: %w", what, cerr)
	}
	*err = errors.Join(*err, cerr)
}
