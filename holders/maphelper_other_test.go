//go:build !linux

package holders

import (
	"fmt"
	"os"
)

func mapHelper(string) {
	fmt.Fprintln(os.Stderr, "map helper: Linux only")
	os.Exit(2)
}

func scanHelper(string) {
	fmt.Fprintln(os.Stderr, "scan helper: Linux only")
	os.Exit(2)
}

func holdHelper(string) {
	fmt.Fprintln(os.Stderr, "hold helper: Linux only")
	os.Exit(2)
}
