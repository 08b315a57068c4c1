package supervisor

import (
	"fmt"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/store"
)

// EventStoreForeign: a file at a store's path is not the store's own
// (another user's, or a -wal/-shm linked twice): the store is not
// guarded while it is there, and nothing is frozen, pinned or captured
// for it (holders/foreign.go has the rule).
const EventStoreForeign = "store.foreign"

// foreignAt names the first file at the store's paths in gen that is not
// the store's own and says why; "" when every file there is.
func (w *worker) foreignAt(gen store.Generation) (path, why string) {
	for _, f := range []struct {
		role holders.Role
		st   fileid.State
	}{{holders.RoleMain, gen.Main}, {holders.RoleWAL, gen.WAL}, {holders.RoleSHM, gen.SHM}} {
		if !f.st.Exists {
			continue
		}
		if why := holders.ForeignWhy(w.target, f.role, f.st.UID, f.st.Nlink); why != "" {
			return w.target.RolePath(f.role), why
		}
	}
	return "", ""
}

// refuseForeign releases the guard and reports the store unguarded when
// gen has a foreign file at one of its paths, saying so once per file:
// arming would have root hold, lock and later pin another user's file.
// It reports whether it refused.
func (w *worker) refuseForeign(gen store.Generation) bool {
	path, why := w.foreignAt(gen)
	if why == "" {
		w.guard.foreign = ""
		return false
	}
	if key := path + "\x00" + why + "\x00" + fmt.Sprint(gen.IDs()); w.guard.foreign != key {
		w.guard.foreign = key
		w.log.Error("a file at the store's path is not the store's own; not guarded, nothing is frozen, pinned or captured for it",
			"event", EventStoreForeign, "path", path, "reason", why,
			"hint", "move the file out of the profile directory (as its owner or root); the store is guarded again once its files are its owner's")
	}
	w.guard.setRetry(false)
	w.guardUnavailable(false, "foreign file "+path+": "+why)
	return true
}
