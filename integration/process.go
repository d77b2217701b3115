package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// exitBound is how long a process may take to exit after SIGTERM or SIGKILL.
// A pipeline must finish or abort its open transaction within it.
const exitBound = 30 * time.Second

// child is a started OS process whose stdout and stderr go to one log file.
//
// One goroutine per child waits for it; it ends when the process exits, so
// every child must be made to exit (see Process cleanup and Broker.Close)
// for the package to stay free of leaked goroutines.
type child struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}

	// Written by the wait goroutine before done is closed.
	state   *os.ProcessState
	waitErr error
}

func startChild(name, logPath, bin string, args ...string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	// Handing os/exec an *os.File makes the child write to it directly, with
	// no copying goroutines in this process that could outlive the child.
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		c.state = cmd.ProcessState
		logFile.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signal sends sig and waits up to bound for the process to exit.
// It refuses to signal a process that has already exited: the caller is
// about to claim that its signal ended the process.
func (c *child) signal(sig syscall.Signal, bound time.Duration) (*os.ProcessState, error) {
	if c.exited() {
		return c.state, fmt.Errorf("%s (pid %d) had already exited (%v) before %v was sent", c.name, c.pid(), c.state, sig)
	}
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, fmt.Errorf("sending %v to %s (pid %d): %w", sig, c.name, c.pid(), err)
	}
	return c.wait(bound)
}

func (c *child) wait(bound time.Duration) (*os.ProcessState, error) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-c.done:
		return c.state, nil
	case <-timer.C:
		return nil, fmt.Errorf("%s (pid %d) still running after %v", c.name, c.pid(), bound)
	}
}

// forceStop makes sure the process is gone, for cleanup paths that must not
// leave a child (and its wait goroutine) behind.
func (c *child) forceStop() {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// killedBySIGKILL reports whether the wait status says the process died of
// SIGKILL, and describes the status either way.
func killedBySIGKILL(state *os.ProcessState) (bool, string) {
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok {
		return false, fmt.Sprintf("unknown wait status %v", state)
	}
	return ws.Signaled() && ws.Signal() == syscall.SIGKILL, state.String()
}

// tailFile returns up to the last n lines of a file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const window = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(-window, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// fileContains reports whether the file holds s; a missing file holds nothing.
func fileContains(path string, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(s))
}

// Process is one run of a child process owned by a test: the pipeline, or
// anything else the test starts.
//
// Its output goes to a log file (LogPath) whose tail is printed if the test
// fails. Methods that assert call t.Fatal and so belong on the test
// goroutine. A process still running when the test ends is SIGKILLed and
// reaped by the test's cleanup.
type Process struct {
	t testing.TB
	c *child
}

var processSeq atomic.Int64

// StartProcess starts bin with args, its output captured under logDir.
func StartProcess(t testing.TB, logDir, name, bin string, args ...string) *Process {
	t.Helper()
	logPath := filepath.Join(logDir, fmt.Sprintf("%s-%d.log", name, processSeq.Add(1)))
	c, err := startChild(name, logPath, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started %s (pid %d), log %s", name, c.pid(), logPath)
	p := &Process{t: t, c: c}
	t.Cleanup(func() {
		running := !c.exited()
		c.forceStop()
		if running || t.Failed() {
			t.Logf("%s (pid %d, %v) log tail:\n%s", name, c.pid(), describeExit(c), tailFile(logPath, 40))
		}
	})
	return p
}

func describeExit(c *child) string {
	if !c.exited() {
		return "running"
	}
	return c.state.String()
}

// LogPath is the file holding the process's stdout and stderr.
func (p *Process) LogPath() string { return p.c.log }

// Pid is the OS process id.
func (p *Process) Pid() int { return p.c.pid() }

// Exited is closed when the process has exited, for whatever reason.
func (p *Process) Exited() <-chan struct{} { return p.c.done }

// Kill sends SIGKILL and asserts from the wait status that the process died
// of it. A process that exited on its own before the kill fails the test:
// a fault that did not fire proves nothing.
func (p *Process) Kill() {
	p.t.Helper()
	state, err := p.c.signal(syscall.SIGKILL, exitBound)
	if err != nil {
		p.t.Fatalf("SIGKILL did not fire: %v\n%s log tail:\n%s", err, p.c.name, tailFile(p.c.log, 40))
	}
	if ok, status := killedBySIGKILL(state); !ok {
		p.t.Fatalf("%s (pid %d) was sent SIGKILL but its wait status is %q", p.c.name, p.c.pid(), status)
	}
}

// Term sends SIGTERM and asserts that the process exits with status 0
// within exitBound.
func (p *Process) Term() {
	p.t.Helper()
	state, err := p.c.signal(syscall.SIGTERM, exitBound)
	if err != nil {
		p.t.Fatalf("SIGTERM: %v\n%s log tail:\n%s", err, p.c.name, tailFile(p.c.log, 40))
	}
	if code := state.ExitCode(); code != 0 {
		p.t.Fatalf("%s (pid %d) exited with %q after SIGTERM, want exit status 0\nlog tail:\n%s", p.c.name, p.c.pid(), state, tailFile(p.c.log, 40))
	}
}

// Wait waits up to bound for the process to exit by itself and returns its
// state, failing the test if it is still running.
func (p *Process) Wait(bound time.Duration) *os.ProcessState {
	p.t.Helper()
	state, err := p.c.wait(bound)
	if err != nil {
		p.t.Fatal(err)
	}
	return state
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return tailFile(p.c.log, n) }

// sleepOrExit waits d, or less if the process exits first, so a schedule of
// faults does not wait on a process that is already gone.
func (p *Process) sleepOrExit(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-p.c.done:
	case <-ctx.Done():
	}
}
