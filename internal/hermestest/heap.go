package hermestest

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
)

// HeapGrowth runs fn and returns by how many bytes the process's heap grew
// above what was live before it, at the highest point seen while fn ran.
// The collector runs eagerly meanwhile, so the figure is close to what fn
// kept live: a test compares it with the size of the input to tell a
// stream from a whole-file read (memory measured in the process, not
// timed).
func HeapGrowth(fn func()) int64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			default:
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			runtime.Gosched()
		}
	}()
	fn()
	close(done)
	<-stopped
	return int64(peak.Load()) - int64(base)
}

// WriteBigJSONL writes a diverted JSONL of n user messages of about
// lineSize bytes each at path, and returns its size.
func WriteBigJSONL(path string, n, lineSize int) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	word := make([]byte, 0, lineSize+64)
	for len(word) < lineSize {
		word = append(word, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx "...)
	}
	var size int64
	for i := range n {
		line := `{"role": "user", "content": "` + string(word) + strconv.Itoa(i) + `", "timestamp": ` + strconv.Itoa(1000+i) + "}\n"
		k, err := f.WriteString(line)
		size += int64(k)
		if err != nil {
			f.Close()
			return size, err
		}
	}
	return size, f.Close()
}
