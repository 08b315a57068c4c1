package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// captureRetired is Hermes' capture_retired_wal_generation, from what it
// does: the retired WAL is found among this process's own fds by its
// recorded (st_dev, st_ino), never by name, and copied with pread into
// <db>.retired-wal-<UTC YYYYmmdd-HHMMSS>-<pid>[-n].partial/ (each file as
// <name>.part, fsynced, renamed), next to the -shm when still held and the
// main now at the path (whole up to 512 MiB, else its 100-byte header);
// manifest.json is written last, then the directory renamed to its final
// name. pause stops it right after the staging directory and an empty
// state.db-wal.part exist, so a test can freeze and kill it there.
func captureRetired(db string, sidecars map[string]fileIdentity, trigger string, pause bool) (string, error) {
	walID, ok := sidecars["-wal"]
	if !ok {
		return "", fmt.Errorf("no recorded WAL generation identity for %s; refusing to guess it by pathname", db)
	}
	walFD := ownFD(walID)
	if walFD == nil {
		return "", fmt.Errorf("this process no longer holds the retired WAL inode %v of %s", walID, db)
	}
	now := time.Now().UTC()
	stem := fmt.Sprintf("%s.retired-wal-%s-%d", db, now.Format("20060102-150405"), os.Getpid())
	final := stem
	for n := 1; exists(final) || exists(final+".partial"); n++ {
		final = stem + "-" + strconv.Itoa(n)
	}
	staging := final + ".partial"
	if err := os.Mkdir(staging, 0o700); err != nil {
		return "", fmt.Errorf("stage capture %s: %w", staging, err)
	}
	if pause {
		if f, err := os.Create(filepath.Join(staging, filepath.Base(db)+"-wal.part")); err == nil {
			f.Close()
		}
		select {} // frozen here until killed, as a process stopped mid-capture
	}
	dir, err := writeCapture(db, staging, final, trigger, now, sidecars, walFD)
	if err != nil {
		os.RemoveAll(staging)
		return "", err
	}
	return dir, nil
}

func writeCapture(db, staging, final, trigger string, now time.Time, sidecars map[string]fileIdentity, walFD *os.File) (string, error) {
	base := filepath.Base(db)
	walEntry, err := copyFD(walFD, filepath.Join(staging, base+"-wal"))
	if err != nil {
		return "", err
	}
	walEntry["identity"] = []uint64{sidecars["-wal"].dev, sidecars["-wal"].ino}
	m := map[string]any{
		"version": 1, "database": db, "trigger": trigger, "pid": os.Getpid(),
		"captured_at": now.Format("2006-01-02T15:04:05Z"),
		"python":      "3.12.0", "sqlite": "3.46.0", "wal": walEntry, "shm": nil,
		"note": "Frames in the captured WAL were committed by the retired generation. Whether they belong on top of the main file now at the path is an operator decision; inspect the copied image with `hermes sessions recover --inspect-only` first.",
	}
	pathGen := map[string]any{}
	for s, id := range currentSidecars(db) {
		pathGen[s] = []uint64{id.dev, id.ino}
	}
	m["path_generation_at_capture"] = pathGen
	if shmID, ok := sidecars["-shm"]; ok {
		if f := ownFD(shmID); f != nil {
			if e, err := copyFD(f, filepath.Join(staging, base+"-shm")); err == nil {
				e["identity"] = []uint64{shmID.dev, shmID.ino}
				m["shm"] = e
			}
		}
	}
	main, err := captureMain(db, staging)
	if err != nil {
		return "", err
	}
	m["main"] = main
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	if err := writeSynced(filepath.Join(staging, "manifest.json"), b); err != nil {
		return "", err
	}
	if err := syncPath(staging); err != nil {
		return "", err
	}
	if err := os.Rename(staging, final); err != nil {
		return "", fmt.Errorf("publish capture %s: %w", final, err)
	}
	return final, syncPath(filepath.Dir(final))
}

// captureMain copies the main now at the path: Hermes reads it through
// its probe fd for the path, which names the new file after a replace.
func captureMain(db, staging string) (map[string]any, error) {
	base := filepath.Base(db)
	header := preadPath(db, 0, 100)
	if len(header) < 100 {
		return nil, fmt.Errorf("cannot read the main image header of %s", db)
	}
	fi, err := os.Stat(db)
	if err != nil {
		return nil, fmt.Errorf("stat main %s: %w", db, err)
	}
	id, _ := statIdentity(db)
	main := map[string]any{"identity": []uint64{id.dev, id.ino}, "size": fi.Size(), "header": parseHeader(header)}
	if fi.Size() > 512<<20 {
		if err := writeSynced(filepath.Join(staging, base+".header"), header); err != nil {
			return nil, err
		}
		main["mode"], main["file"], main["bytes"] = "header_only", base+".header", len(header)
		return main, nil
	}
	f := probeFDs[id]
	if f == nil {
		preadPath(db, 0, 1)
		if f = probeFDs[id]; f == nil {
			return nil, fmt.Errorf("open main %s for the capture", db)
		}
	}
	e, err := copyRange(f, fi.Size(), filepath.Join(staging, base))
	if err != nil {
		return nil, err
	}
	main["mode"] = "copied"
	for k, v := range e {
		main[k] = v
	}
	return main, nil
}

func parseHeader(h []byte) map[string]any {
	be := func(off int) uint32 {
		return uint32(h[off])<<24 | uint32(h[off+1])<<16 | uint32(h[off+2])<<8 | uint32(h[off+3])
	}
	if string(h[:16]) != "SQLite format 3\x00" {
		return map[string]any{"valid": false}
	}
	ps := uint32(h[16])<<8 | uint32(h[17])
	if ps == 1 {
		ps = 65536
	}
	return map[string]any{"valid": true, "page_size": ps, "change_counter": be(24), "page_count": be(28),
		"user_version": be(60), "application_id": be(68), "version_valid_for": be(92)}
}

// retained keeps every fd ownFD hands out: closing any fd on the -shm
// would drop the POSIX locks this process's connection holds there.
var retained []*os.File

// ownFD finds this process's open fd on the inode id, never by name, and
// returns a dup of it that is never closed, only read with pread.
func ownFD(id fileIdentity) *os.File {
	for _, dir := range []string{"/proc/self/fd", "/dev/fd"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			var st syscall.Stat_t
			if syscall.Fstat(n, &st) != nil || (fileIdentity{uint64(st.Dev), uint64(st.Ino)}) != id {
				continue
			}
			d, err := syscall.Dup(n)
			if err != nil {
				return nil
			}
			f := os.NewFile(uintptr(d), "retired")
			retained = append(retained, f)
			return f
		}
		return nil
	}
	return nil
}

func copyFD(f *os.File, dest string) (map[string]any, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat the retired file for %s: %w", dest, err)
	}
	return copyRange(f, st.Size, dest)
}

// copyRange preads size bytes of src into dest.part, fsyncs and renames
// it; a short read is an error, never a truncated copy.
func copyRange(src *os.File, size int64, dest string) (map[string]any, error) {
	part := dest + ".part"
	out, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", part, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.NewSectionReader(src, 0, size))
	if err == nil && n != size {
		err = fmt.Errorf("short read copying %s: %d of %d bytes", filepath.Base(dest), n, size)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(part, dest)
	}
	if err != nil {
		os.Remove(part)
		return nil, fmt.Errorf("copy %s: %w", dest, err)
	}
	return map[string]any{"file": filepath.Base(dest), "bytes": n, "sha256": hex.EncodeToString(h.Sum(nil))}, nil
}

func writeSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncPath(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
