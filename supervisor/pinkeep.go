package supervisor

import (
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/sdnotify"
	"github.com/stateguard/stateguard/store"
)

// PinKeeper keeps copies of incidents' pins in the service manager's
// file descriptor store (systemd's FDSTORE=1, FileDescriptorStoreMax= in
// the unit), so an orphan only the agent held outlives an agent that
// crashed or was killed before it could capture it: a -wal unlinked from
// an idle store while its disk is full is the case that needs it. The
// next agent gets the copies back in $LISTEN_FDS and its Resume pins the
// orphan again from them. A nil *PinKeeper, or one without a notify
// socket, keeps nothing.
type PinKeeper struct {
	n   *sdnotify.Notifier
	log *slog.Logger

	// manager is the service manager's pid (agentd's parent): the
	// process that holds the copies.
	manager int

	mu     sync.Mutex
	handed map[string][]incident.Pin  // passed at start, by incident
	stored map[string]map[string]bool // fd store names in use, by incident
	// ids are the inodes of the copies, by incident; gone are those of
	// dropped copies, until the manager has surely closed them.
	ids  map[string][]fileid.ID
	gone map[fileid.ID]time.Time
}

// dropGrace is how long a dropped copy's inode is still taken for the
// manager's: FDSTOREREMOVE=1 is a datagram the manager acts on a moment
// later, and a scan meanwhile must not find the manager holding it.
const dropGrace = 10 * time.Second

const pinNamePrefix = "pin."

// pinName is the store name of incident's pin in role: the incident id
// and the role, neither of which holds a colon or a space.
func pinName(incident string, role holders.Role) string {
	return pinNamePrefix + incident + "." + string(role)
}

func parsePinName(name string) (incident string, role holders.Role, ok bool) {
	rest, ok := strings.CutPrefix(name, pinNamePrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", "", false
	}
	role = holders.Role(rest[i+1:])
	switch role {
	case holders.RoleMain, holders.RoleWAL, holders.RoleSHM:
		return rest[:i], role, true
	}
	return "", "", false
}

// NewPinKeeper takes the fds the service manager passed at start (its
// store's pins; anything else is closed and removed from the store).
func NewPinKeeper(n *sdnotify.Notifier, passed []sdnotify.ListenedFD, log *slog.Logger) *PinKeeper {
	if log == nil {
		log = slog.Default()
	}
	k := &PinKeeper{n: n, log: log.With("subsystem", "pinkeep"), manager: os.Getppid(), handed: map[string][]incident.Pin{},
		stored: map[string]map[string]bool{}, ids: map[string][]fileid.ID{}, gone: map[fileid.ID]time.Time{}}
	for _, p := range passed {
		id, role, ok := parsePinName(p.Name)
		var st unix.Stat_t
		if ok && unix.Fstat(int(p.File.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			fid := fileid.FromStat(&st)
			k.handed[id] = append(k.handed[id], incident.Pin{Role: role, ID: fid, File: p.File})
			k.name(id, p.Name)
			k.ids[id] = append(k.ids[id], fid)
			continue
		}
		k.log.Warn("dropping an fd the service manager passed that is no incident's pin", "name", p.Name)
		p.File.Close()
		if sdnotify.ValidFDName(p.Name) {
			_ = k.n.RemoveFDs(p.Name)
		}
	}
	if len(k.handed) > 0 {
		k.log.Info("pins kept by the service manager handed back", "incidents", len(k.handed), "fds", len(passed))
	}
	return k
}

func (k *PinKeeper) name(id, name string) {
	if k.stored[id] == nil {
		k.stored[id] = map[string]bool{}
	}
	k.stored[id][name] = true
}

// Keep sends the store a copy of f: a new open file description of the
// same inode (no lock of the agent's goes with it), read-only.
func (k *PinKeeper) Keep(mainPath, id string, role holders.Role, f *os.File) {
	if k == nil || !k.n.Enabled() {
		return
	}
	name := pinName(id, role)
	c, err := reopenReadOnly(f)
	if err != nil {
		k.log.Warn("pin not kept by the service manager; it lives only as long as the agent", "incident", id, "role", string(role), "err", err)
		return
	}
	defer func() {
		// Closing our copy of a -shm would drop the agent's connections'
		// POSIX locks on it (store.CloseSHM).
		if role == holders.RoleSHM {
			_ = store.CloseSHM(mainPath, c)
		} else {
			c.Close()
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(int(c.Fd()), &st); err != nil {
		k.log.Warn("pin not kept by the service manager; it lives only as long as the agent", "incident", id, "role", string(role), "err", err)
		return
	}
	// Known before the manager has it: no scan may find the manager
	// holding the copy as a process of its own.
	k.mu.Lock()
	k.ids[id] = append(k.ids[id], fileid.FromStat(&st))
	k.mu.Unlock()
	err = k.n.StoreFDs(name, c)
	if err != nil {
		k.log.Warn("pin not kept by the service manager; it lives only as long as the agent", "incident", id, "role", string(role), "err", err,
			"hint", "the unit needs FileDescriptorStoreMax= (agentd install --force writes it)")
		return
	}
	k.mu.Lock()
	k.name(id, name)
	k.mu.Unlock()
}

// Reclaim hands over the copies passed at start for id.
func (k *PinKeeper) Reclaim(id string) []incident.Pin {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	ps := k.handed[id]
	delete(k.handed, id)
	return ps
}

// Drop removes id's copies from the store and closes any not reclaimed;
// mainPath is the incident's store, for a -shm's close.
func (k *PinKeeper) Drop(mainPath, id string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	ps, names := k.handed[id], k.stored[id]
	delete(k.handed, id)
	delete(k.stored, id)
	now := time.Now()
	for fid, until := range k.gone {
		if now.After(until) {
			delete(k.gone, fid)
		}
	}
	until := now.Add(dropGrace)
	for _, fid := range k.ids[id] {
		k.gone[fid] = until
	}
	delete(k.ids, id)
	k.mu.Unlock()
	for _, p := range ps {
		// Any close of a -shm fd drops this process's POSIX locks on it,
		// its SQLite connections' read marks included.
		if p.Role == holders.RoleSHM {
			_ = store.CloseSHM(mainPath, p.File)
		} else {
			p.File.Close()
		}
	}
	for name := range names {
		if err := k.n.RemoveFDs(name); err != nil {
			k.log.Warn("kept pin not removed from the service manager's store", "incident", id, "name", name, "err", err)
		}
	}
}

// Kept reports whether the file pid holds is a copy of a pin this
// agent, or the one before it, kept (holders.Options.Kept).
func (k *PinKeeper) Kept(pid int, id fileid.ID) bool {
	if k == nil || pid != k.manager {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ids := range k.ids {
		if slices.Contains(ids, id) {
			return true
		}
	}
	until, ok := k.gone[id]
	if ok && time.Now().After(until) {
		delete(k.gone, id)
		return false
	}
	return ok
}

// DropExcept drops the copies of every incident not in keep: those whose
// incident a previous agent finished after keeping them.
func (k *PinKeeper) DropExcept(keep map[string]bool) {
	if k == nil {
		return
	}
	k.mu.Lock()
	var gone []string
	for id := range k.stored {
		if !keep[id] {
			gone = append(gone, id)
		}
	}
	k.mu.Unlock()
	for _, id := range gone {
		// At start: no connection of the agent's is open on any store,
		// so a -shm copy closes at once whatever its store.
		k.Drop("", id)
	}
}

// keeper is the engine's Keeper: none (not a nil *PinKeeper in an
// interface) when the agent keeps no copies.
func (a *Agent) keeper() incident.Keeper {
	if a.opts.Keeper == nil {
		return nil
	}
	return a.opts.Keeper
}
