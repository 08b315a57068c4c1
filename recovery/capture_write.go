//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// captureNote is the manifest's note, in the spirit of Hermes' own.
const captureNote = "Frames in the captured WAL were committed by an orphaned generation of this store " +
	"(captured by stateguard after its writers stopped). Whether they belong on top of the main file now " +
	"at the path is decided by stateguard's divert step or by the operator; inspect a private copy, " +
	"never the capture itself."

// WriteCapture copies an orphaned generation from its pinned fds into a
// Hermes-compatible directory next to the store:
// <db>.retired-wal-<UTC YYYYmmdd-HHMMSS>-<pid>[-n], staged as .partial
// (0700, files O_CREAT|O_EXCL|O_NOFOLLOW 0600, owned by req.Owner), each
// file a reflink clone when the filesystem allows and a pread copy
// otherwise, hashed with sha256 and fsynced, then manifest.json, fsync,
// rename to the final name (never over an existing one) and fsync of the
// store's directory.
//
// The bytes needed are measured first; over req.MaxBytes, short of free
// space, or on ENOSPC, the staging directory is removed and the error
// wraps ErrNoSpace and says how many bytes are needed where: the caller
// keeps the orphan pinned and alerts. A main over MainImageMaxBytes is kept
// as its 100-byte header only, as Hermes does; Capture.MainHeaderOnly and
// a warning say so. A store directory others may write to, or a symlinked
// store file or directory, is refused (ErrUnsafeDir).
//
// The fds must not be written while this runs (the holders are stopped);
// a source whose size changes fails the capture with ErrSourceChanged.
func WriteCapture(ctx context.Context, src CaptureSource, req CaptureRequest) (Capture, error) {
	if err := req.check(); err != nil {
		return Capture{}, err
	}
	store, base, owner, err := openStore(&req)
	if err != nil {
		return Capture{}, err
	}
	defer store.close()
	r := &captureRun{ctx: ctx, req: &req, log: req.logger(), store: store, base: base, owner: owner}
	defer func() { r.stage.close() }()
	if req.Staging != "" {
		if r.partial, r.stage, err = openStaging(store, &req, base); err != nil {
			return Capture{}, err
		}
	}
	p, err := r.plan(src)
	defer p.close()
	if err != nil {
		return Capture{}, err
	}
	if err := r.checkSpace(p.need); err != nil {
		return Capture{}, err
	}
	if r.partial != "" {
		if err := r.clearInterrupted(p); err != nil {
			return Capture{}, err
		}
	}
	if r.partial == "" {
		if r.partial, r.stage, err = stage(store, &req, base, owner); err != nil {
			return Capture{}, r.spaceErr(err, p.need)
		}
		r.ownStage = true
	}
	c, err := r.write(p)
	if err != nil {
		r.abort()
		return Capture{}, r.spaceErr(err, p.need)
	}
	if c.MainHeaderOnly {
		r.log.Warn("capture keeps only the main header: the main is larger than the copy limit",
			"path", c.Dir, "main_size", c.Manifest.Main.Size, "limit", MainImageMaxBytes)
	}
	r.log.Debug("capture written", "path", c.Dir, "bytes", c.Bytes, "reflinked", c.Reflinked)
	return c, nil
}

type captureRun struct {
	ctx      context.Context
	req      *CaptureRequest
	log      *slog.Logger
	store    capDir
	base     string
	owner    Owner
	partial  string // staging directory name in store
	stage    capDir
	ownStage bool     // we made the staging dir: remove it on failure
	created  []string // files we wrote into the staging dir
}

func (r *captureRun) write(p *capturePlan) (Capture, error) {
	m := &Manifest{
		Version:    ManifestVersion,
		Database:   r.req.DBPath,
		Trigger:    r.req.Trigger,
		PID:        r.req.PID,
		CapturedAt: r.req.Now.UTC().Format(CapturedAtLayout),
		Note:       captureNote,
		Stateguard: &StateguardInfo{
			Version:    1,
			IncidentID: r.req.IncidentID,
			Kind:       r.req.Kind,
			Origins:    map[string]string{},
		},
	}
	sg := m.Stateguard
	var total int64
	clones, copies := 0, 0
	note := func(c copiedFile) {
		total += c.bytes
		sg.Origins[c.name] = c.origin
		switch c.origin {
		case "reflink":
			clones++
		case "copy":
			copies++
		}
	}
	// The WAL first: it is what exists nowhere else.
	for _, sc := range []struct {
		plan *planFile
		dst  **ManifestFile
		sfx  string
	}{{p.wal, &m.WAL, "-wal"}, {p.shm, &m.SHM, "-shm"}} {
		if sc.plan == nil {
			continue
		}
		c, err := r.sidecar(sc.plan, r.base+sc.sfx)
		if err != nil {
			return Capture{}, err
		}
		note(c)
		id := fileid.Pair(sc.plan.id)
		*sc.dst = &ManifestFile{Identity: &id, File: c.name, Bytes: c.bytes, SHA256: c.sha256}
		if sc.sfx == "-wal" {
			sg.WALHeader = parseCaptureWALHeader(c.head)
		}
		if err := r.ctx.Err(); err != nil {
			return Capture{}, err
		}
	}
	if p.main != nil {
		c, err := r.mainImage(p)
		if err != nil {
			return Capture{}, err
		}
		note(c)
		id := fileid.Pair(p.main.id)
		hdr := ParseMainHeader(c.head)
		m.Main = &ManifestMain{Identity: &id, Size: p.main.size, Header: &hdr, File: c.name, Bytes: c.bytes, SHA256: c.sha256, Mode: MainModeCopied}
		sg.MainSource = "pinned"
		if p.mainSnap != "" {
			sg.MainSource = "snapshot"
		}
		if p.headerOnly {
			m.Main.Mode = MainModeHeaderOnly
			sg.MainHeaderOnly = true
		}
	}
	sg.Reflinked = clones > 0 && copies == 0
	m.PathGeneration = map[string]fileid.Pair{}
	for _, sfx := range []string{"-wal", "-shm"} {
		if st, err := r.store.lstat(r.base + sfx); err == nil {
			m.PathGeneration[sfx] = fileid.Pair(fileid.FromStat(&st))
		}
	}
	if err := r.writeManifest(m); err != nil {
		return Capture{}, err
	}
	dir, err := r.publish()
	if err != nil {
		return Capture{}, err
	}
	return Capture{Dir: dir, Manifest: m, Bytes: total, Reflinked: sg.Reflinked, MainHeaderOnly: p.headerOnly}, nil
}

// clearInterrupted removes from a staging directory of ours what an
// earlier run of this capture wrote before it was cut short (an agent
// killed mid-copy): the files this run writes again. Each is created
// O_EXCL, so a half-written main left there failed every resumed capture
// with "file exists", the orphan's writers frozen all along. The
// quarantined sidecars the staging directory holds are adopted, never
// removed.
func (r *captureRun) clearInterrupted(p *capturePlan) error {
	names := []string{r.base, r.base + ".header", ManifestName}
	for _, sc := range []struct {
		plan *planFile
		sfx  string
	}{{p.wal, "-wal"}, {p.shm, "-shm"}} {
		if sc.plan != nil && !sc.plan.adopt {
			names = append(names, r.base+sc.sfx)
		}
	}
	for _, name := range names {
		err := unix.Unlinkat(r.stage.fd, name, 0)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("clear interrupted capture: remove %s: %w", r.stage.join(name), err)
		}
		if err == nil {
			r.log.Info("removed what an interrupted capture left", "path", r.stage.join(name))
		}
	}
	return nil
}

// sidecar copies a pinned sidecar into the staging dir, or adopts the
// quarantined original already there (hashing it in place).
func (r *captureRun) sidecar(p *planFile, name string) (copiedFile, error) {
	if !p.adopt {
		c, err := copyPrefixIntoDir(r.ctx, p.src, p.srcName, p.size, p.keep, r.stage, name, r.owner, true)
		if err == nil {
			r.created = append(r.created, name)
		}
		return c, err
	}
	f, err := openatRegular(r.stage, name)
	if err != nil {
		return copiedFile{}, fmt.Errorf("open quarantined %s: %w", r.stage.join(name), err)
	}
	defer f.Close()
	if err := fixModeOwner(int(f.Fd()), 0o600, r.owner); err != nil {
		return copiedFile{}, fmt.Errorf("set owner of %s: %w", f.Name(), err)
	}
	sum, head, err := hashRange(r.ctx, f, f.Name(), p.size)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return copiedFile{}, fmt.Errorf("hash quarantined %s: %w", f.Name(), err)
	}
	return copiedFile{name: name, bytes: p.size, sha256: sum, origin: "quarantined", head: head, id: p.id}, nil
}

// mainImage writes the main: its header only past the size limit, a hard
// link of our own snapshot when possible, else a clone or copy.
func (r *captureRun) mainImage(p *capturePlan) (copiedFile, error) {
	src := p.main
	if p.headerOnly {
		head, err := readHead(src.src, sqliteHeaderBytes)
		if err != nil {
			return copiedFile{}, fmt.Errorf("read main header of %s: %w", src.srcName, err)
		}
		c, err := writeHeaderFile(r.stage, r.base+".header", head, r.owner)
		c.origin = "header"
		if err == nil {
			r.created = append(r.created, c.name)
		}
		return c, err
	}
	if p.mainSnap != "" {
		if c, ok := r.linkSnapshot(p); ok {
			return c, nil
		}
	}
	c, err := copyIntoDir(r.ctx, src.src, src.srcName, src.size, r.stage, r.base, r.owner, true)
	if err == nil {
		r.created = append(r.created, r.base)
	}
	return c, err
}

// linkSnapshot hard-links our snapshot into the capture, so a sidecar_lost
// capture costs no second copy of the main. ok is false when the link
// cannot be made or is not the file we opened; the caller copies instead.
func (r *captureRun) linkSnapshot(p *capturePlan) (copiedFile, bool) {
	name := r.base
	if err := unix.Linkat(unix.AT_FDCWD, p.mainSnap, r.stage.fd, name, 0); err != nil {
		return copiedFile{}, false
	}
	snap, err := fstatFile(p.main.src)
	st, lerr := r.stage.lstat(name)
	if err != nil || lerr != nil || fileid.FromStat(&st) != fileid.FromStat(&snap) || snap.Size != p.main.size {
		_ = unix.Unlinkat(r.stage.fd, name, 0)
		return copiedFile{}, false
	}
	r.created = append(r.created, name)
	var ferr error
	rc, err := p.main.src.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { ferr = fixModeOwner(int(fd), 0o600, r.owner) })
	}
	sum, head, herr := hashRange(r.ctx, p.main.src, p.mainSnap, p.main.size)
	if err != nil || ferr != nil || herr != nil {
		_ = unix.Unlinkat(r.stage.fd, name, 0)
		r.created = r.created[:len(r.created)-1]
		return copiedFile{}, false
	}
	return copiedFile{name: name, bytes: p.main.size, sha256: sum, origin: "link", head: head, id: fileid.FromStat(&st)}, true
}

func (r *captureRun) writeManifest(m *Manifest) error {
	b, err := encodeManifest(m)
	if err != nil {
		return fmt.Errorf("encode manifest for %s: %w", r.stage.path, err)
	}
	f, err := r.stage.createExcl(ManifestName, r.owner)
	if err != nil {
		return err
	}
	r.created = append(r.created, ManifestName)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", r.stage.join(ManifestName), err)
	}
	return nil
}

// publish fsyncs the staging dir, renames it to its final name (never over
// an existing one: another capture of the same second and pid gets -n),
// drops stateguard's staging files and fsyncs the store's directory. The
// marker goes only after the rename, so a staging dir that failed to
// publish is still recognisably ours.
func (r *captureRun) publish() (string, error) {
	if err := r.stage.sync(); err != nil {
		return "", err
	}
	if err := r.store.verify(); err != nil {
		return "", fmt.Errorf("publish %s: %w", r.store.join(r.partial), err)
	}
	stem := strings.TrimSuffix(r.partial, partialSuffix)
	for n := 0; n < 1000; n++ {
		final := stem
		if n > 0 {
			final = fmt.Sprintf("%s-%d", stem, n)
		}
		err := renameNoReplace(r.store.fd, r.partial, r.store.fd, final)
		if isExist(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("publish %s as %s: %w", r.store.join(r.partial), r.store.join(final), err)
		}
		// From here the capture is complete: nothing below may remove it.
		r.partial, r.ownStage, r.created = "", false, nil
		for _, name := range []string{partialMarker, quarantineList} {
			if err := unix.Unlinkat(r.stage.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				r.log.Warn("could not remove a staging file from a published capture", "path", r.store.join(final), "file", name, "err", err)
			}
		}
		if err := r.stage.sync(); err != nil {
			r.log.Warn("published capture not yet durable", "path", r.store.join(final), "err", err)
		}
		if err := r.store.sync(); err != nil {
			r.log.Warn("published capture's directory entry not yet durable", "path", r.store.join(final), "err", err)
		}
		return r.store.join(final), nil
	}
	return "", fmt.Errorf("publish %s: 1000 captures named %s[-n] exist; remove old captures", r.store.join(r.partial), r.store.join(stem))
}

// abort removes what this run wrote. A staging dir it did not create, or
// one holding quarantined originals, stays (with its marker) for a retry:
// those originals exist nowhere else.
func (r *captureRun) abort() {
	if r.partial == "" || r.stage.fd <= 0 {
		return
	}
	for _, name := range r.created {
		_ = unix.Unlinkat(r.stage.fd, name, 0)
	}
	if r.ownStage && !r.stage.exists(quarantineList) {
		_ = unix.Unlinkat(r.stage.fd, partialMarker, 0)
		if err := unix.Unlinkat(r.store.fd, r.partial, unix.AT_REMOVEDIR); err != nil {
			r.log.Warn("could not remove a failed capture's staging directory", "path", r.store.join(r.partial), "err", err)
		}
	} else {
		_ = r.stage.sync()
	}
	_ = r.store.sync()
}
