//go:build unix

package recovery

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"
)

// errDivertRaced: another divert of the same incident was published while
// this one was being written.
var errDivertRaced = errors.New("divert published concurrently")

// writeDivert writes every file of diffs and divert.json into a staging
// directory .<incident>.partial in recovered, then renames it to
// <incident>. rep gets the files and counts.
func writeDivert(ctx context.Context, log *slog.Logger, recovered capDir, rep *DivertReport, diffs []sessionDiff, owner Owner) (err error) {
	staging := "." + rep.IncidentID + divertStagingSuffix
	if recovered.exists(staging) {
		// Left by a divert that crashed before publishing: never visible
		// as a divert, safe to drop.
		log.Info("removing an interrupted divert's staging directory", "path", recovered.join(staging))
		if err := recovered.removeAll(staging); err != nil {
			return fmt.Errorf("remove interrupted divert: %w", err)
		}
	}
	stg, err := recovered.mkdir(staging, owner)
	if err != nil {
		return fmt.Errorf("create %s: %w", recovered.join(staging), err)
	}
	defer stg.close()
	defer func() {
		if err != nil {
			_ = recovered.removeAll(staging)
		}
	}()

	var pre capDir
	havePre := false
	defer func() {
		if havePre {
			pre.close()
		}
	}()
	for _, d := range diffs {
		rep.Sessions++
		rep.CaptureRows += d.captureRows
		rep.HealthyRows += d.healthyRows
		rep.Unreplayable += d.unreplayable
		for _, set := range []struct {
			rows []divertRow
			pre  bool
		}{{d.replay, false}, {d.pre, true}} {
			if len(set.rows) == 0 {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			dir, rel := stg, divertFileName(d.sid)
			if set.pre {
				if !havePre {
					if pre, err = stg.mkdir(DivertPreReplacementDir, owner); err != nil {
						return fmt.Errorf("create %s: %w", stg.join(DivertPreReplacementDir), err)
					}
					havePre = true
				}
				dir, rel = pre, filepath.Join(DivertPreReplacementDir, rel)
			}
			f := DivertFile{SessionID: d.sid, Path: filepath.Join(rep.Dir, rel), Rows: len(set.rows),
				PreReplacement: set.pre, NewSession: d.newSession, Session: d.session}
			if f.Bytes, f.SHA256, err = writeDivertJSONL(dir, filepath.Base(rel), set.rows, owner); err != nil {
				return err
			}
			if set.pre {
				rep.PreReplacementRows += f.Rows
			} else {
				rep.ReplayRows += f.Rows
			}
			rep.Files = append(rep.Files, f)
		}
	}
	if havePre {
		if err := pre.sync(); err != nil {
			return err
		}
	}
	b, err := encodeManifest(rep.manifest(time.Now()))
	if err != nil {
		return fmt.Errorf("encode %s: %w", DivertManifestName, err)
	}
	if err := writeSynced(stg, DivertManifestName, b, owner); err != nil {
		return err
	}
	if err := stg.sync(); err != nil {
		return err
	}
	if err := recovered.verify(); err != nil {
		return fmt.Errorf("publish %s: %w", recovered.join(staging), err)
	}
	if err := renameNoReplace(recovered.fd, staging, recovered.fd, rep.IncidentID); err != nil {
		if isExist(err) {
			return errDivertRaced
		}
		return fmt.Errorf("publish %s as %s: %w", recovered.join(staging), rep.Dir, err)
	}
	if err := recovered.sync(); err != nil {
		// Published and complete; only its durability across a power cut
		// is in doubt, and a re-run finds it or writes it again.
		log.Warn("divert published but its directory could not be synced", "dir", rep.Dir, "err", err)
	}
	return nil
}

// writeDivertJSONL writes rows as JSONL into d/name (created exclusive,
// 0600, owner), fsyncs it and checks it the way a replay reads it: every
// line a record, none dropped or repaired.
func writeDivertJSONL(d capDir, name string, rows []divertRow, owner Owner) (n int64, sum string, err error) {
	f, err := d.createExcl(name, owner)
	if err != nil {
		return 0, "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			n, sum, err = 0, "", fmt.Errorf("close %s: %w", d.join(name), cerr)
		}
	}()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, 256<<10)
	var buf []byte
	for _, r := range rows {
		// ensure_ascii: every line is plain ASCII, so no reader can split
		// it at a Unicode line separator inside a string.
		buf = r.line.AppendJSON(buf[:0], ascii)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return 0, "", fmt.Errorf("write %s: %w", d.join(name), err)
		}
	}
	if err := bw.Flush(); err != nil {
		return 0, "", fmt.Errorf("write %s: %w", d.join(name), err)
	}
	if err := f.Sync(); err != nil {
		return 0, "", fmt.Errorf("fsync %s: %w", d.join(name), err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, "", fmt.Errorf("read back %s: %w", d.join(name), err)
	}
	parsed, err := ParseDiverted(f)
	if err != nil {
		return 0, "", fmt.Errorf("read back %s: %w", d.join(name), err)
	}
	if len(parsed.Issues) > 0 || len(parsed.Repaired) > 0 || len(parsed.Records) != len(rows) {
		return 0, "", fmt.Errorf("read back %s: %d of %d rows are records (%v, repaired lines %v): this is a stateguard bug, please report it",
			d.join(name), len(parsed.Records), len(rows), parsed.Issues, parsed.Repaired)
	}
	return cw.n, hex.EncodeToString(h.Sum(nil)), nil
}

// writeSynced writes b to d/name (created exclusive, 0600, owner) and
// fsyncs it.
func writeSynced(d capDir, name string, b []byte, owner Owner) error {
	f, err := d.createExcl(name, owner)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", d.join(name), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", d.join(name), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", d.join(name), err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
