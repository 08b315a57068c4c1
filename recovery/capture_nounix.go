//go:build !unix

package recovery

import "os"

// openNoFollow opens path read-only. Captures are written and validated
// only on unix; this keeps ReadManifest available elsewhere.
func openNoFollow(path string) (*os.File, error) { return os.Open(path) }
