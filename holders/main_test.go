package holders

import (
	"fmt"
	"os"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// scanHelperEnv makes the test binary a scan helper: it scans the stores
// listed in the variable (separated by ':') and prints the Result as JSON.
// Tests run it under another uid to see what an unprivileged scan reports.
const scanHelperEnv = "STATEGUARD_HOLDERS_SCAN_HELPER"

// scanRuleEnv is the scan helper's verdict rule.
const scanRuleEnv = "STATEGUARD_HOLDERS_SCAN_RULE"

// mapHelperEnv makes the test binary map the named file, close its fd,
// say "ready" and wait for stdin to close: a holder by mapping only.
const mapHelperEnv = "STATEGUARD_HOLDERS_MAP_HELPER"

// holdHelperEnv makes the test binary hold the files listed (':'
// separated) open, as holdFlagsEnv says, until stdin closes.
const (
	holdHelperEnv = "STATEGUARD_HOLDERS_HOLD_HELPER"
	holdFlagsEnv  = "STATEGUARD_HOLDERS_HOLD_FLAGS"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(mapHelperEnv); path != "" {
		mapHelper(path)
	}
	if paths := os.Getenv(scanHelperEnv); paths != "" {
		scanHelper(paths)
	}
	if paths := os.Getenv(holdHelperEnv); paths != "" {
		holdHelper(paths)
	}
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	// The writer the tests built (hermestest.WriterBinary).
	if err := hermestest.RemoveBuilt(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// afterTests run once after every test and benchmark (shared fixtures).
var afterTests []func()
