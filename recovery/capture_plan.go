//go:build unix

package recovery

import (
	"errors"
	"fmt"
	"os"

	"github.com/stateguard/stateguard/fileid"
)

// planFile is one source of the capture.
type planFile struct {
	src     *os.File
	srcName string
	size    int64
	// keep is how many leading bytes are copied: size, or for a pinned
	// -wal the end of its last frame anyone reads (walKeep).
	keep int64
	// alloc is what a copy of it takes on disk: its allocated blocks (a
	// copy skips holes), never more than its size.
	alloc int64
	adopt bool      // already in the staging dir (a quarantined original)
	id    fileid.ID // identity of the generation's file
}

type capturePlan struct {
	wal, shm   *planFile
	main       *planFile
	mainSnap   string // main is our own snapshot at this path
	mainOpened bool   // we opened main.src and close it
	headerOnly bool
	need       int64
}

func (p *capturePlan) close() {
	if p != nil && p.mainOpened && p.main != nil {
		p.main.src.Close()
	}
}

// plan measures every source and decides what is copied, adopted or cut.
func (r *captureRun) plan(src CaptureSource) (*capturePlan, error) {
	p := &capturePlan{need: manifestSlack}
	var err error
	if p.wal, err = r.planSidecar(src.WAL, "-wal"); err != nil {
		return p, err
	}
	if p.shm, err = r.planSidecar(src.SHM, "-shm"); err != nil {
		return p, err
	}
	if p.wal == nil && (r.req.Kind == KindSidecarLost || r.req.Kind == KindMispaired || r.req.Kind == KindRewritten) {
		return p, fmt.Errorf("capture of %s (%s): no WAL to capture: pass the pinned orphan WAL", r.req.DBPath, r.req.Kind)
	}
	switch {
	case src.Main != nil && src.MainSnapshot != "":
		return p, fmt.Errorf("capture of %s: both a pinned main and a main snapshot given; pass one", r.req.DBPath)
	case src.Main != nil:
		if p.main, err = planPinned(src.Main, "pinned main of "+r.req.DBPath); err != nil {
			return p, err
		}
	case src.MainSnapshot != "":
		f, err := openNoFollow(src.MainSnapshot)
		if err != nil {
			return p, fmt.Errorf("capture of %s: open main snapshot: %w", r.req.DBPath, err)
		}
		p.mainOpened, p.mainSnap = true, src.MainSnapshot
		if p.main, err = planPinned(f, src.MainSnapshot); err != nil {
			f.Close()
			p.mainOpened = false
			return p, err
		}
		// The snapshot is a copy; the identity recorded is the store's main,
		// which for sidecar_lost is still the file at the path.
		if st, err := r.store.lstat(r.base); err == nil {
			p.main.id = fileid.FromStat(&st)
		}
	}
	if p.main != nil {
		p.headerOnly = p.main.size > MainImageMaxBytes
		if p.headerOnly {
			p.need += sqliteHeaderBytes
		} else {
			p.need += p.main.alloc
		}
	}
	for _, f := range []*planFile{p.wal, p.shm} {
		if f != nil && !f.adopt {
			p.need += f.alloc
		}
	}
	return p, nil
}

func planPinned(f *os.File, name string) (*planFile, error) {
	st, err := fstatFile(f)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if !isRegular(&st) {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return &planFile{src: f, srcName: name, size: st.Size, keep: st.Size, alloc: min(st.Size, allocBytes(&st)), id: fileid.FromStat(&st)}, nil
}

// planSidecar plans the -wal or -shm: a quarantined original already in
// the staging dir is adopted when it is the pinned inode (or nothing is
// pinned); otherwise the pinned fd is copied.
func (r *captureRun) planSidecar(f *os.File, suffix string) (*planFile, error) {
	name := r.base + suffix
	var pinned *planFile
	if f != nil {
		var err error
		if pinned, err = planPinned(f, "pinned "+name+" of "+r.req.DBPath); err != nil {
			return nil, err
		}
	}
	if r.stage.fd > 0 {
		if st, err := r.stage.lstat(name); err == nil {
			if !isRegular(&st) {
				return nil, fmt.Errorf("capture of %s: %s is not a regular file", r.req.DBPath, r.stage.join(name))
			}
			id := fileid.FromStat(&st)
			if pinned != nil && pinned.id != id {
				return nil, fmt.Errorf("capture of %s: staging holds %s with identity %s but the pinned %s is %s: they are different generations; finish the capture in a new staging directory",
					r.req.DBPath, r.stage.join(name), id, suffix, pinned.id)
			}
			size := st.Size
			if suffix == "-wal" {
				var err error
				if size, err = r.cutAdopted(name, size); err != nil {
					return nil, err
				}
			}
			return &planFile{srcName: r.stage.join(name), size: size, keep: size, adopt: true, id: id}, nil
		}
	}
	if pinned != nil && suffix == "-wal" {
		keep, err := walKeep(r.ctx, pinned.src, pinned.srcName, pinned.size)
		if err != nil {
			return nil, fmt.Errorf("capture of %s: %w", r.req.DBPath, err)
		}
		pinned.keep, pinned.alloc = keep, min(pinned.alloc, keep)
	}
	return pinned, nil
}

// checkSpace refuses a capture over budget or larger than the free space
// (less a reserve the live store keeps), before anything is written.
// Without a configured budget (MaxBytes 0) the budget is half the free
// space of the store's filesystem: one capture can never fill the disk,
// and each later one gets at most half of what is left. A capture that
// replaces an earlier one (Supersedes) counts that one's bytes as free.
func (r *captureRun) checkSpace(need int64) error {
	free := freeBytes(r.store)
	budget, configured := r.req.MaxBytes, r.req.MaxBytes > 0
	if !configured && free >= 0 {
		budget = (free + max(r.req.Supersedes, 0)) / 2
	}
	if (configured || free >= 0) && need > budget {
		return &BudgetError{Store: r.req.DBPath, Dir: r.store.path, Need: need, Budget: budget, Free: free, Configured: configured}
	}
	if free >= 0 && need+freeReserve > free {
		return fmt.Errorf("%w: capture of %s needs %d bytes in %s (plus %d kept free), %d available: free at least %d bytes there; the orphan stays pinned",
			ErrNoSpace, r.req.DBPath, need, r.store.path, freeReserve, free, need+freeReserve-free)
	}
	return nil
}

// spaceErr turns ENOSPC/EDQUOT met while writing into ErrNoSpace.
func (r *captureRun) spaceErr(err error, need int64) error {
	if err == nil || errors.Is(err, ErrNoSpace) || !isNoSpace(err) {
		return err
	}
	return fmt.Errorf("%w: capture of %s needs %d bytes in %s: %w; free space there and retry, the orphan stays pinned",
		ErrNoSpace, r.req.DBPath, need, r.store.path, err)
}
