package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// profileDirEnv names a directory where agentd run writes Go profiles of
// itself, for measuring the agent at scale (internal/benchscale, issue
// 16). It is a developer switch, not configuration: unset (the default)
// nothing is profiled. When set, the directory gets
//
//	cpu-start.pprof   CPU from the start of run until every store had its first check
//	cpu-run.pprof     CPU from then until the agent is told to stop
//	heap.pprof        the live heap when it is told to stop (before Close)
//	goroutines.txt    the goroutine count, memory totals and stacks at the same moment
//
// Read them with `go tool pprof <agentd binary> <file>`.
const profileDirEnv = "STATEGUARD_PROFILE_DIR"

// profiler writes the profiles profileDirEnv asks for; the zero value
// (no directory) does nothing.
type profiler struct {
	dir string
	cpu *os.File
}

func startProfiler() *profiler {
	p := &profiler{dir: os.Getenv(profileDirEnv)}
	p.startCPU("cpu-start.pprof")
	return p
}

func (p *profiler) startCPU(name string) {
	if p.dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(p.dir, name))
	if err != nil {
		fmt.Fprintf(termErr, "agentd: %s: %v\n", profileDirEnv, err)
		p.dir = ""
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(termErr, "agentd: %s: %v\n", profileDirEnv, err)
		f.Close()
		return
	}
	p.cpu = f
}

func (p *profiler) stopCPU() {
	if p.cpu == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := p.cpu.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %s: %v\n", profileDirEnv, err)
	}
	p.cpu = nil
}

// started ends the start-up profile and begins the running one.
func (p *profiler) started() {
	p.stopCPU()
	p.startCPU("cpu-run.pprof")
}

// stopping ends the running profile and writes the heap and goroutines.
func (p *profiler) stopping() {
	if p.dir == "" {
		return
	}
	p.stopCPU()
	runtime.GC() // the heap profile shows live objects as of the last GC
	if f, err := os.Create(filepath.Join(p.dir, "heap.pprof")); err == nil {
		err := pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %s: heap.pprof: %v\n", profileDirEnv, err)
		}
	}
	if f, err := os.Create(filepath.Join(p.dir, "goroutines.txt")); err == nil {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fmt.Fprintf(f, "goroutines: %d\nheap in use: %d KiB, stacks in use: %d KiB, from the OS: %d KiB, allocated in all: %d KiB, GCs: %d\n",
			runtime.NumGoroutine(), m.HeapInuse>>10, m.StackInuse>>10, m.Sys>>10, m.TotalAlloc>>10, m.NumGC)
		err := pprof.Lookup("goroutine").WriteTo(f, 1)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentd: %s: goroutines.txt: %v\n", profileDirEnv, err)
		}
	}
}
