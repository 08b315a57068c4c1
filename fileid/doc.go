// Package fileid is file identity, the one notion every safety rule of
// stateguard rests on: a store file is its (st_dev, st_ino), never its
// name. It converts stat(2) results once per OS, so identities from lstat,
// fstat, /proc/<pid>/maps and libproc compare equal wherever they were
// taken, and it is imported by holders, store and recovery alike.
//
// It is a leaf: it imports nothing of stateguard.
package fileid
