package store

import "golang.org/x/sys/unix"

const ofdSetLK = unix.F_OFD_SETLK
