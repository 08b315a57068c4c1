package store

// ofdSetLK is F_OFD_SETLK in <sys/fcntl.h> (private on macOS).
const ofdSetLK = 90
