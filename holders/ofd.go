package holders

import (
	"fmt"
	"os"
)

// The byte ranges SQLite locks (os_unix.c): a connection that wants to be
// the last closer must take the main file EXCLUSIVE, which needs every
// byte of the SHARED range; and it must get the DMS byte of -shm
// exclusively before it may unlink -wal and -shm. A read lock held by
// another open file description on either range makes both impossible,
// without stopping any reader or writer: readers take SHARED themselves,
// writers only take RESERVED/PENDING bytes outside the range and the WAL
// locks at 120..127 of -shm.
const (
	sharedFirst = 0x40000000 + 2 // PENDING_BYTE + 2
	sharedSize  = 510
	shmDMSByte  = 128 // 120 + SQLITE_SHM_NLOCK: the dead-man switch
	shmCkptByte = 121 // 120 + WAL_CKPT_LOCK: a checkpointer holds it exclusively
	// 120 + WAL_READ_LOCK(1): a writer restarting a fully checkpointed WAL
	// needs read locks 1..4 exclusively.
	shmReadMark1 = 124
)

// LockMainShared takes an OFD read lock on the SHARED range of a main
// database file opened read-only. The lock belongs to f's open file
// description: no other close() in this process cancels it, and it goes
// away only when f is closed.
func LockMainShared(f *os.File) error {
	if err := ofdReadLock(f, sharedFirst, sharedSize); err != nil {
		return fmt.Errorf("OFD read lock on %s [%#x,+%d): %w", f.Name(), sharedFirst, sharedSize, err)
	}
	return nil
}

// LockSHMCheckpoint takes OFD read locks on the checkpoint byte and the
// first reader-slot byte of an orphaned generation's -shm: the orphan's
// own checkpoints then fail busy (a PASSIVE one is skipped, as SQLite
// does when another connection checkpoints), and a WAL it had already
// checkpointed whole is not restarted by its next write (the restart
// needs reader slots 1..4 exclusively; the write appends instead), so
// the WAL keeps the position its incident cut the replay at. Never on a
// live generation: its writers need their checkpoints.
func LockSHMCheckpoint(f *os.File) error {
	for _, b := range []int64{shmCkptByte, shmReadMark1} {
		if err := ofdReadLock(f, b, 1); err != nil {
			return fmt.Errorf("OFD read lock on %s byte %d: %w", f.Name(), b, err)
		}
	}
	return nil
}

// LockSHMRead takes an OFD read lock on the -shm dead-man-switch byte.
func LockSHMRead(f *os.File) error {
	if err := ofdReadLock(f, shmDMSByte, 1); err != nil {
		return fmt.Errorf("OFD read lock on %s byte %d: %w", f.Name(), shmDMSByte, err)
	}
	return nil
}
