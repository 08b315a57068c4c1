package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// agent is one agentd child process and what its log said.
type agent struct {
	cmd     *exec.Cmd
	pid     int
	exited  chan struct{}
	mu      sync.Mutex
	records []map[string]any // the log lines the bench uses
	more    chan struct{}    // signalled on every kept line
}

// keep lists the log messages and events the bench reads.
func keep(r map[string]any) bool {
	switch r["event"] {
	case "agent.started", "holder.frozen", "incident.resolved", "guard.armed", "generation.changed":
		return true
	}
	return r["msg"] == "reconcile done"
}

func startAgent(bin, dir, home string, reconcile time.Duration, env []string) (*agent, error) {
	cfg := fmt.Sprintf(`state_dir = %q
socket = %q
reconcile = %q
guard = true
discover_users = false
homes = [%q]

[policy]
replaced = "kill"

[log]
format = "json"
level = "debug"
`, filepath.Join(dir, "state"), filepath.Join(dir, "run", "agent.sock"), reconcile.String(), home)
	conf := filepath.Join(dir, "agent.toml")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", conf)
	cmd.Env = append(append(os.Environ(), "HERMES_HOME="+home), env...)
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agentd: %w", err)
	}
	a := &agent{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{}), more: make(chan struct{}, 1)}
	go a.read(bufio.NewScanner(out))
	go func() { _ = cmd.Wait(); close(a.exited) }()
	return a, nil
}

func (a *agent) read(sc *bufio.Scanner) {
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r map[string]any
		if json.Unmarshal(sc.Bytes(), &r) != nil || !keep(r) {
			continue
		}
		r["_seen"] = time.Now()
		a.mu.Lock()
		a.records = append(a.records, r)
		a.mu.Unlock()
		select {
		case a.more <- struct{}{}:
		default:
		}
	}
}

// wait returns the first kept record from index from on that match says
// yes to, and its index; an error after d.
func (a *agent) wait(from int, d time.Duration, match func(map[string]any) bool) (map[string]any, int, error) {
	deadline := time.After(d)
	for {
		a.mu.Lock()
		for i := from; i < len(a.records); i++ {
			if match(a.records[i]) {
				r := a.records[i]
				a.mu.Unlock()
				return r, i, nil
			}
		}
		from = len(a.records)
		a.mu.Unlock()
		select {
		case <-a.more:
		case <-a.exited:
			return nil, 0, fmt.Errorf("agentd exited")
		case <-deadline:
			return nil, 0, fmt.Errorf("not seen within %v", d)
		}
	}
}

func (a *agent) mark() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.records)
}

// since returns the kept records from index from on.
func (a *agent) since(from int) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.records[from:]...)
}

func (a *agent) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// cpuTicks is the process's user+system time in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k, nil
}

// memKB reads VmRSS and VmHWM.
func memKB(pid int) (rss, peak int64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n
		case "VmHWM:":
			peak = n
		}
	}
	return rss, peak
}

// inotifyWatches counts the watches on pid's inotify fds.
func inotifyWatches(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if t, _ := os.Readlink(filepath.Join(dir, e.Name())); t != "anon_inode:inotify" {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		n += strings.Count(string(b), "inotify wd:")
	}
	return n
}
