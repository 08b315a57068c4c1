//go:build unix

package recovery

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// executePublish puts the backup at the path of a missing or broken store:
// safety copy of whatever is there, the new main staged next to it and
// fsynced, leftover sidecars removed (the caller proved nobody holds
// them), rename over the path, directory fsync. Every step first checks
// that the files are still the ones planned on.
func (p *RestorePlan) executePublish(ctx context.Context, res RestoreResult) (RestoreResult, error) {
	d, err := openStoreDir(p.dir, p.dirID)
	if err != nil {
		return res, fmt.Errorf("restore into %s: %w", p.dir, err)
	}
	defer d.close()
	if err := p.unchanged(roleMain, roleWAL, roleSHM); err != nil {
		return res, err
	}
	if res.SafetyCopy, err = p.byteSafetyCopy(ctx, d); err != nil {
		return res, err
	}

	src, err := openNoFollow(p.privDB)
	if err != nil {
		return res, fmt.Errorf("restore: open private copy: %w", err)
	}
	defer src.Close()
	st, err := fstatFile(src)
	if err != nil {
		return res, fmt.Errorf("restore: stat private copy: %w", err)
	}
	staged := fmt.Sprintf("%s.restore-%s-%d%s", p.base, p.now().UTC().Format("20060102-150405"), os.Getpid(), partialSuffix)
	if _, err := copyIntoDir(ctx, src, p.privDB, st.Size, d, staged, p.owner, true); err != nil {
		return res, fmt.Errorf("restore: stage %s: %w (nothing was changed; the safety copy is %s)", d.join(staged), err, safetyList(res))
	}
	published := false
	defer func() {
		if !published {
			_ = unix.Unlinkat(d.fd, staged, 0)
		}
	}()

	for _, r := range []int{roleWAL, roleSHM} {
		if !p.files[r].exists {
			continue
		}
		if err := p.unchanged(r); err != nil {
			return res, err
		}
		if err := unix.Unlinkat(d.fd, p.base+roleSuffix[r], 0); err != nil {
			return res, fmt.Errorf("restore: remove leftover %s: %w (the safety copy is %s)", p.Target+roleSuffix[r], err, safetyList(res))
		}
		res.RemovedSidecars = append(res.RemovedSidecars, p.Target+roleSuffix[r])
	}
	if err := p.unchanged(roleMain); err != nil {
		return res, err
	}
	if p.files[roleMain].exists {
		err = unix.Renameat(d.fd, staged, d.fd, p.base)
	} else {
		err = renameNoReplace(d.fd, staged, d.fd, p.base)
	}
	if err != nil {
		return res, fmt.Errorf("restore: rename %s over %s: %w (the safety copy is %s)", d.join(staged), p.Target, err, safetyList(res))
	}
	published = true
	if err := d.sync(); err != nil {
		return res, err
	}

	db, err := store.OpenReadOnly(p.Target)
	if err != nil {
		return res, fmt.Errorf("restore: open the published %s: %w", p.Target, err)
	}
	defer db.Close()
	return p.verify(ctx, db, res)
}

// byteSafetyCopy copies the main and -wal that are at the path (a broken
// store cannot be backed up through SQLite) to <name>.pre-restore-<UTC>
// and its -wal, so the pair opens together. The -shm is not copied:
// SQLite rebuilds it.
func (p *RestorePlan) byteSafetyCopy(ctx context.Context, d capDir) ([]string, error) {
	if !p.files[roleMain].exists && !p.files[roleWAL].exists {
		return nil, nil
	}
	name, err := p.safetyName(d)
	if err != nil {
		return nil, err
	}
	var staged, done []string
	cleanup := func() {
		for _, s := range staged {
			_ = unix.Unlinkat(d.fd, s, 0)
		}
	}
	for _, r := range []int{roleMain, roleWAL} {
		if !p.files[r].exists {
			continue
		}
		path := p.Target + roleSuffix[r]
		f, err := openNoFollow(path)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("restore: safety copy: open %s: %w", path, err)
		}
		st, err := fstatFile(f)
		if err == nil && fileid.FromStat(&st) != p.files[r].id {
			err = ErrTargetChanged
		}
		if err != nil {
			f.Close()
			cleanup()
			return nil, fmt.Errorf("restore: safety copy of %s: %w", path, err)
		}
		partial := name + roleSuffix[r] + partialSuffix
		_, err = copyIntoDir(ctx, f, path, st.Size, d, partial, p.owner, true)
		f.Close()
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("restore: safety copy of %s: %w (nothing was changed)", path, err)
		}
		staged = append(staged, partial)
	}
	for _, partial := range staged {
		final := strings.TrimSuffix(partial, partialSuffix)
		if err := renameNoReplace(d.fd, partial, d.fd, final); err != nil {
			cleanup()
			return done, fmt.Errorf("restore: publish safety copy %s: %w", d.join(final), err)
		}
		done = append(done, d.join(final))
	}
	return done, d.sync()
}

func safetyList(res RestoreResult) string {
	if len(res.SafetyCopy) == 0 {
		return "none: there was nothing to copy"
	}
	return strings.Join(res.SafetyCopy, ", ")
}
