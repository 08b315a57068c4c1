package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/internal/sdnotify"
)

// fdStoreMax is the unit's FileDescriptorStoreMax= (service/templates).
const fdStoreMax = 1024

// agentProc keeps one agentd running, as a service manager would: it
// restarts it after a kill -9 (after the delay the fault chose) and after
// a crash (which it records: agentd must never exit on its own).
type agentProc struct {
	e   *env
	log *slog.Logger

	mu          sync.Mutex
	cmd         *exec.Cmd
	exited      chan struct{} // closed when cmd has exited
	up          bool          // running and answering on the socket
	upC         chan struct{} // closed when up becomes true
	restartIn   time.Duration // set by kill9 for the next restart
	wakeC       chan struct{} // ends the wait for a restart early (stopForFault)
	killedByUs  bool
	stopping    bool
	incarnation int
	restarts    int
	ups         []upInterval
	crashes     []string

	client *http.Client
	done   chan struct{} // keeper ended
	// fds is the file descriptor store systemd keeps for the unit
	// (FileDescriptorStoreMax=): agentd's kept pins, handed back at
	// every start, across kills and restarts alike.
	fds *sdnotify.FDStore

	stopOnce sync.Once
	stopErr  error
}

func newAgentProc(e *env, log *slog.Logger) *agentProc {
	a := &agentProc{e: e, log: log, upC: make(chan struct{}), done: make(chan struct{}), wakeC: make(chan struct{}, 1)}
	a.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.socket)
		}},
	}
	return a
}

// run is the keeper loop; it returns when stop was called and agentd exited.
func (a *agentProc) run() {
	defer close(a.done)
	backoff := 500 * time.Millisecond
	for {
		a.mu.Lock()
		if a.stopping {
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		if err := a.start(); err != nil {
			a.log.Warn("agentd did not start; retrying", "err", err)
			time.Sleep(backoff)
			continue
		}
		<-a.exited
		a.mu.Lock()
		a.up = false
		a.ups[len(a.ups)-1].to = time.Now()
		a.upC = make(chan struct{})
		delay, byUs, stopping := a.restartIn, a.killedByUs, a.stopping
		a.restartIn, a.killedByUs = 0, false
		code := a.cmd.ProcessState.String()
		if !byUs && !stopping {
			tail := logTail(a.logPath(a.incarnation), 20)
			a.crashes = append(a.crashes, fmt.Sprintf("agentd incarnation %d exited by itself (%s); log tail:\n%s", a.incarnation, code, tail))
			delay = time.Second
		}
		a.mu.Unlock()
		if stopping {
			return
		}
		if !byUs {
			a.log.Error("agentd exited by itself; restarting", "incarnation", a.incarnation, "status", code)
		}
		select {
		case <-time.After(delay):
		case <-a.wakeC:
		}
	}
}

func (a *agentProc) logPath(n int) string {
	return filepath.Join(a.e.logs, fmt.Sprintf("agentd-%03d.log", n))
}

func (a *agentProc) start() error {
	a.mu.Lock()
	a.incarnation++
	n := a.incarnation
	a.mu.Unlock()
	lf, err := os.OpenFile(a.logPath(n), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open agentd log: %w", err)
	}
	if a.fds == nil {
		if a.fds, err = sdnotify.ListenFDStore(filepath.Join(filepath.Dir(a.e.socket), "notify.sock"), fdStoreMax); err != nil {
			lf.Close()
			return err
		}
	}
	files, listen, err := a.fds.Files()
	if err != nil {
		lf.Close()
		return err
	}
	// The child has its own copies once started; ours go either way.
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	argv := sdnotify.ListenWrapper(a.e.agentd, "run", "--config", a.e.config)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.ExtraFiles = files
	// Only the temp home: HERMES_HOME wins over ~/.hermes in discovery.
	cmd.Env = append(os.Environ(), "HERMES_HOME="+a.e.home, sdnotify.EnvSocket+"="+a.fds.Addr)
	cmd.Env = append(cmd.Env, listen...)
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start agentd: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(exited)
	}()
	a.mu.Lock()
	a.cmd, a.exited = cmd, exited
	if n > 1 {
		a.restarts++
	}
	a.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("agentd exited during start (%s); see %s", cmd.ProcessState, a.logPath(n))
		default:
		}
		var st map[string]any
		if err := a.get(context.Background(), "/v1/status", &st); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("agentd socket did not answer within 60s; see %s", a.logPath(n))
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.mu.Lock()
	a.up = true
	a.ups = append(a.ups, upInterval{from: time.Now()})
	close(a.upC)
	a.mu.Unlock()
	return nil
}

// upInterval is one stretch of time agentd answered its socket; to is
// zero while it still does.
type upInterval struct{ from, to time.Time }

// upSince reports whether agentd was up at t and had been for at least d.
func (a *agentProc) upSince(t time.Time, d time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, u := range a.ups {
		if !u.from.After(t.Add(-d)) && (u.to.IsZero() || u.to.After(t)) {
			return true
		}
	}
	return false
}

// isUp reports whether agentd runs and answered its socket.
func (a *agentProc) isUp() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.up
}

// waitUp blocks until agentd is up or ctx ends.
func (a *agentProc) waitUp(ctx context.Context) error {
	a.mu.Lock()
	if a.up {
		a.mu.Unlock()
		return nil
	}
	c := a.upC
	a.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *agentProc) pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.up || a.cmd == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// kill9 kills agentd with SIGKILL; the keeper restarts it after delay.
func (a *agentProc) kill9(delay time.Duration) bool {
	a.mu.Lock()
	if !a.up {
		a.mu.Unlock()
		return false
	}
	a.killedByUs, a.restartIn = true, delay
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return true
}

// stop ends agentd with SIGTERM and reports how it exited. A restart in
// flight is signalled too, so the keeper always ends.
func (a *agentProc) stop(timeout time.Duration) error {
	a.stopOnce.Do(func() { a.stopErr = a.stopNow(timeout) })
	return a.stopErr
}

func (a *agentProc) stopNow(timeout time.Duration) error {
	a.mu.Lock()
	a.stopping = true
	a.mu.Unlock()
	deadline := time.Now().Add(timeout)
	var signalled *exec.Cmd
	wasUp := false
	for {
		a.mu.Lock()
		cmd, up := a.cmd, a.up
		a.mu.Unlock()
		if cmd != nil && cmd != signalled {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			signalled, wasUp = cmd, up
		}
		select {
		case <-a.done:
			if signalled != nil && wasUp && !signalled.ProcessState.Success() {
				return fmt.Errorf("agentd stopped with %s (see %s)", signalled.ProcessState, a.logPath(a.incarnation))
			}
			return nil
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) && signalled != nil {
			_ = signalled.Process.Kill()
			<-a.done
			return fmt.Errorf("agentd did not stop within %v of SIGTERM; killed", timeout)
		}
	}
}

// closeFDStore closes the store and the pins it keeps, as systemd does
// when the unit stops for good.
func (a *agentProc) closeFDStore() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fds != nil {
		_ = a.fds.Close()
	}
}

// get decodes GET path from the control API into v.
func (a *agentProc) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agentd"+path, nil)
	if err != nil {
		return err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// apiIncident and apiJob are the fields of the control API's answers the
// run needs; decoding only those keeps the harness independent of the
// supervisor's Go types.
type apiIncident struct {
	ID         string    `json:"id"`
	Store      string    `json:"store"`
	Profile    string    `json:"profile"`
	Kind       string    `json:"kind"`
	State      string    `json:"state"`
	Policy     string    `json:"policy"`
	OpenedAt   time.Time `json:"opened_at"`
	ResolvedAt time.Time `json:"resolved_at"`
	Detail     struct {
		CapturePath string `json:"capture_path"`
		Holders     []struct {
			PID int `json:"pid"`
		} `json:"holders"`
		DivertDir string `json:"divert_dir"`
		Error     string `json:"error"`
	} `json:"detail"`
}

type apiJob struct {
	ID         int64  `json:"id"`
	IncidentID string `json:"incident_id"`
	Store      string `json:"store"`
	State      string `json:"state"`
	LastError  string `json:"last_error"`
	Result     *struct {
		Appended int `json:"appended"`
		Skipped  int `json:"skipped"`
		Invalid  int `json:"invalid"`
	} `json:"result"`
}

func (a *agentProc) incidents(ctx context.Context, all bool) ([]apiIncident, error) {
	var out []apiIncident
	path := "/v1/incidents"
	if all {
		path += "?all=1"
	}
	return out, a.get(ctx, path, &out)
}

func (a *agentProc) jobs(ctx context.Context) ([]apiJob, error) {
	var out []apiJob
	return out, a.get(ctx, "/v1/jobs", &out)
}

func terminalIncident(state string) bool { return state == "resolved" || givenUp(state) }

// givenUp: the incident ended without replaying its rows (failed, or
// unrecoverable: its capture could not be used).
func givenUp(state string) bool { return state == "failed" || state == "unrecoverable" }

func pendingJob(state string) bool { return state == "queued" || state == "running" }

// upAfter is the first moment at or after t when agentd was up: t itself
// when it was up then, the next start when it was down, t when it never
// came back.
func (a *agentProc) upAfter(t time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, u := range a.ups {
		if !u.from.After(t) && (u.to.IsZero() || u.to.After(t)) {
			return t
		}
		if u.from.After(t) {
			return u.from
		}
	}
	return t
}
