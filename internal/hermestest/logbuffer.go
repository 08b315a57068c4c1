package hermestest

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"testing"
)

// LogBuffer collects log output from concurrent goroutines (an agent's,
// an alerter's) for a test to read back.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Records decodes the buffer as JSON lines and returns those whose
// "event" is event ("" for every record).
func (l *LogBuffer) Records(tb testing.TB, event string) []map[string]any {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(l.String())))
	var out []map[string]any
	for {
		var r map[string]any
		if err := dec.Decode(&r); err == io.EOF {
			return out
		} else if err != nil {
			tb.Fatalf("log is not JSON lines: %v", err)
		}
		if event == "" || r["event"] == event {
			out = append(out, r)
		}
	}
}
