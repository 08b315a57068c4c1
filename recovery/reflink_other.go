//go:build unix && !linux && !darwin

package recovery

import "os"

// cloneOrCreate creates name in d for a byte copy: this platform has no
// reflink call stateguard knows.
func cloneOrCreate(src *os.File, d capDir, name string, owner Owner) (dst *os.File, cloned bool, err error) {
	dst, err = d.createExcl(name, owner)
	return dst, false, err
}
