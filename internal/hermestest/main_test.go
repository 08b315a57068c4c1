package hermestest

import "testing"

// The tests start the test writer, which they build: Main removes it
// when they end.
func TestMain(m *testing.M) { Main(m) }
