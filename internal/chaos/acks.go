package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// ackWatch tails every writer's ack file and notes when each ack line was
// first seen: an upper bound on when its row committed. A row's own
// timestamp is taken before its commit starts (and a writer may wait on a
// busy lock for seconds after it), so only the ack time can say that a row
// was committed before a backup began.
type ackWatch struct {
	mu   sync.Mutex
	seen map[rowKey]time.Time
	off  map[string]int64
	tail map[string][]byte // a partial last line, completed by the next read
}

func newAckWatch() *ackWatch {
	return &ackWatch{seen: map[rowKey]time.Time{}, off: map[string]int64{}, tail: map[string][]byte{}}
}

// run polls the files every 50 ms until stop is closed, then once more.
func (w *ackWatch) run(files []string, stop <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		for _, f := range files {
			w.poll(f)
		}
		select {
		case <-stop:
			for _, f := range files {
				w.poll(f)
			}
			return
		case <-t.C:
		}
	}
}

func (w *ackWatch) poll(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	w.mu.Lock()
	off := w.off[path]
	w.mu.Unlock()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(f)
	if err != nil || len(b) == 0 {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.off[path] = off + int64(len(b))
	b = append(w.tail[path], b...)
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		w.tail[path] = b
		return
	}
	w.tail[path] = append([]byte(nil), b[i+1:]...)
	for _, line := range strings.Split(string(b[:i]), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			continue
		}
		seq, err1 := strconv.ParseInt(f[1], 10, 64)
		ts, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		k := rowKey{session: f[0], content: hermestest.MessageContent(f[0], seq), ts: ts}
		if _, ok := w.seen[k]; !ok {
			w.seen[k] = now
		}
	}
}

// seenAt is when the ack for k was first seen; zero when never.
func (w *ackWatch) seenAt(k rowKey) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[k]
}
