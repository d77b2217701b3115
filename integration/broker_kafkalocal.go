package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// kafkaLocalStartBound is how long `kafka-local.sh start` may take: on a
// machine without the jars cached it first fetches them with Maven.
const kafkaLocalStartBound = 5 * time.Minute

// errPrerequisites is the script's exit status 3: no Java 17+, or no Maven
// while the jars are not cached yet.
var errPrerequisites = errors.New("prerequisites missing (exit status 3)")

// kafkaLocal is Apache Kafka (KRaft, one combined broker and controller)
// run from its published jars with the machine's Java by
// scripts/kafka-local.sh, which the methods call one command each: start,
// stop (SIGTERM, wait), kill (SIGKILL), version, clean.
//
// The broker is not a child of the test binary (the script detaches it), so
// its wait status cannot be read. Each fault is shown to have fired another
// way: the pid the script recorded is alive before and gone after, and the
// data dir tells a clean shutdown from a crash: Kafka writes
// .kafka_cleanshutdown into its log dir only at the end of a clean shutdown,
// and removes it at start-up.
//
// A watchdog process holds the read end of a pipe whose write end only the
// test binary holds: if the binary dies without Close (a test time-out
// panic, a SIGKILL), the pipe reaches EOF and the watchdog kills the broker,
// so no JVM outlives the run holding its ports.
type kafkaLocal struct {
	script  string
	dir     string // KAFKA_LOCAL_DIR
	logDir  string // where each broker run's log is kept
	port    int
	ctlPort int
	version string
	extra   []string // more of the script's environment
	props   string   // more server.properties lines

	mu       sync.Mutex
	closed   bool
	runs     int // broker runs whose log was kept
	watchdog *exec.Cmd
	watchW   *os.File
}

func startKafkaLocal(ctx context.Context, env brokerEnv) (Broker, error) {
	if v := os.Getenv("KAFKA_LOCAL"); v != "1" {
		return nil, fmt.Errorf("%w: KAFKA_LOCAL is not 1", errNotApplicable)
	}
	return newKafkaLocal(ctx, filepath.Join(env.dir, "kafka-local"), env.dir, nil, "")
}

// newKafkaLocal starts a broker with its state in dir and its logs kept
// in logDir; env is more of the script's variables, props more
// server.properties lines.
func newKafkaLocal(ctx context.Context, dir, logDir string, env []string, props string) (*kafkaLocal, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	b := &kafkaLocal{
		script: filepath.Join(root, "scripts", "kafka-local.sh"),
		dir:    dir,
		logDir: logDir,
		extra:  env,
		props:  props,
	}
	ctx, cancel := context.WithTimeout(ctx, kafkaLocalStartBound)
	defer cancel()
	// A dir kept from an earlier run (E2E_LOG_DIR) holds another cluster,
	// formatted for other ports: start from nothing.
	if _, err := b.run(ctx, "clean"); err != nil {
		return nil, err
	}
	if b.version, err = b.run(ctx, "version"); err != nil {
		return nil, err
	}
	// Free ports found by listening can be taken before the broker binds
	// them; fresh ones (and a fresh data dir, formatted for the ports) on a
	// failed first start cover that race. Missing prerequisites fail at once:
	// KAFKA_LOCAL=1 asked for a real broker, and a run that quietly fell
	// back to another one would pass without having tested what was asked.
	for attempt := range 3 {
		if b.port, b.ctlPort, err = twoFreePorts(); err != nil {
			return nil, err
		}
		if attempt == 0 {
			if err = b.startWatchdog(); err != nil {
				return nil, err
			}
		}
		if err = b.Start(ctx); err == nil || errors.Is(err, errPrerequisites) {
			break
		}
		if _, cerr := b.run(ctx, "clean"); cerr != nil {
			err = errors.Join(err, cerr)
			break
		}
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// twoFreePorts returns two distinct free ports, both found by holding
// listeners open at the same time.
func twoFreePorts() (int, int, error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

// run runs the script with command and returns its stdout's last line.
func (b *kafkaLocal) run(ctx context.Context, command string) (string, error) {
	out, _, err := b.runFull(ctx, command)
	return out, err
}

// runFull runs the script with command and returns its stdout's last line
// and its stderr.
func (b *kafkaLocal) runFull(ctx context.Context, command string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "bash", b.script, command)
	cmd.Env = append(os.Environ(), b.env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The broker is started detached with its own output, but should
	// anything inherit the pipes, do not wait on it for ever.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return last, stderr.String(), fmt.Errorf("scripts/kafka-local.sh %s: %w: %s", command, errPrerequisites, strings.TrimSpace(stderr.String()))
		}
		return last, stderr.String(), fmt.Errorf("scripts/kafka-local.sh %s: %v\n%s", command, err, strings.TrimSpace(stderr.String()))
	}
	return last, stderr.String(), nil
}

func (b *kafkaLocal) env() []string {
	return append([]string{
		"KAFKA_LOCAL_DIR=" + b.dir,
		"KAFKA_LOCAL_PORT=" + strconv.Itoa(b.port),
		"KAFKA_LOCAL_CONTROLLER_PORT=" + strconv.Itoa(b.ctlPort),
		"KAFKA_LOCAL_TXN_MAX_TIMEOUT_MS=" + strconv.Itoa(int(suiteTxnMaxTimeout.Milliseconds())),
		"KAFKA_LOCAL_EXTRA_PROPERTIES=" + suiteTxnAbortCheck + "\n" + b.props,
	}, b.extra...)
}

// startWatchdog starts the process that kills the broker if the test
// binary dies without closing it. The ports are not needed by `kill`.
func (b *kafkaLocal) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	// A line on stdin is Close saying all is done; EOF is the test binary
	// gone. Not started with sysProcAttr: its parent-death SIGKILL would
	// kill the watchdog before it could do its job.
	cmd := exec.Command("bash", "-c", `if read -r _; then exit 0; fi; exec bash "$0" kill`, b.script)
	cmd.Env = append(os.Environ(), b.env()...)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("starting the kafka-local watchdog: %w", err)
	}
	r.Close()
	b.watchdog, b.watchW = cmd, w
	return nil
}

func (b *kafkaLocal) Addr() string     { return "127.0.0.1:" + strconv.Itoa(b.port) }
func (b *kafkaLocal) Kind() string     { return "kafka-local" }
func (b *kafkaLocal) Version() string  { return "Apache Kafka " + b.version }
func (b *kafkaLocal) CanRestart() bool { return true }

// Start starts the broker, keeping its data, and waits until it is ready.
func (b *kafkaLocal) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("broker is closed")
	}
	if pid, ok := b.pid(); ok {
		return fmt.Errorf("broker already running (pid %d)", pid)
	}
	addr, err := b.run(ctx, "start")
	if err != nil {
		if _, serr := os.Stat(b.logPath()); serr == nil {
			err = fmt.Errorf("%w\nbroker log tail:\n%s", err, tailFile(b.logPath(), 30))
		}
		return err
	}
	if addr != b.Addr() {
		return fmt.Errorf("scripts/kafka-local.sh start printed %q, want %q", addr, b.Addr())
	}
	return nil
}

// Stop asks the broker to shut down (SIGTERM) and requires a clean
// shutdown: the script did not have to fall back to SIGKILL, the process is
// gone, and Kafka left its clean-shutdown marker.
func (b *kafkaLocal) Stop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	pid, ok := b.pid()
	if !ok {
		return errors.New("broker is not running")
	}
	_, stderr, err := b.runFull(ctx, "stop")
	if err != nil {
		return err
	}
	if strings.Contains(stderr, "SIGKILL") {
		return fmt.Errorf("broker (pid %d) did not stop on SIGTERM and was killed: %s", pid, strings.TrimSpace(stderr))
	}
	if alive(pid) {
		return fmt.Errorf("broker (pid %d) still running after scripts/kafka-local.sh stop", pid)
	}
	b.keepLog()
	if !b.cleanShutdownMarked() {
		return fmt.Errorf("broker (pid %d) exited after SIGTERM without a clean shutdown (no %s); log tail:\n%s",
			pid, b.cleanShutdownMarker(), tailFile(b.logPath(), 30))
	}
	return nil
}

// Kill SIGKILLs the broker and requires it to have died without shutting
// down: alive before, gone after, no clean-shutdown marker.
func (b *kafkaLocal) Kill() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	pid, ok := b.pid()
	if !ok {
		return errors.New("broker is not running")
	}
	if b.cleanShutdownMarked() {
		return fmt.Errorf("%s is present while the broker runs: a kill could not be told from a clean stop", b.cleanShutdownMarker())
	}
	ctx, cancel := context.WithTimeout(context.Background(), exitBound)
	defer cancel()
	if _, err := b.run(ctx, "kill"); err != nil {
		return err
	}
	if alive(pid) {
		return fmt.Errorf("broker (pid %d) still running after scripts/kafka-local.sh kill", pid)
	}
	b.keepLog()
	if b.cleanShutdownMarked() {
		return fmt.Errorf("broker (pid %d) was sent SIGKILL but shut down cleanly: the kill did not fire first", pid)
	}
	return nil
}

// pid returns the broker's pid if it is running.
func (b *kafkaLocal) pid() (int, bool) {
	raw, err := os.ReadFile(filepath.Join(b.dir, "broker.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || !alive(pid) {
		return 0, false
	}
	return pid, true
}

// alive reports whether a process exists and has not exited (a zombie
// awaiting its parent counts as gone).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: kill(0) is all there is
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func (b *kafkaLocal) cleanShutdownMarker() string {
	return filepath.Join(b.dir, "data", ".kafka_cleanshutdown")
}

func (b *kafkaLocal) cleanShutdownMarked() bool {
	_, err := os.Stat(b.cleanShutdownMarker())
	return err == nil
}

func (b *kafkaLocal) logPath() string { return filepath.Join(b.dir, "broker.log") }

// keepLog copies the log of the broker run that just ended next to the
// other process logs (kafka-local-N.log), since the script keeps only the
// last two runs' and clean removes them: with E2E_LOG_DIR they outlive the
// test run.
func (b *kafkaLocal) keepLog() {
	data, err := os.ReadFile(b.logPath())
	if err != nil {
		return
	}
	b.runs++
	_ = os.WriteFile(filepath.Join(b.logDir, fmt.Sprintf("kafka-local-%d.log", b.runs)), data, 0o644)
}

// LogTail returns the end of the broker's log.
func (b *kafkaLocal) LogTail(n int) string { return tailFile(b.logPath(), n) }

// Close stops the broker and removes its data dir (`clean`), then lets the
// watchdog go.
func (b *kafkaLocal) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err := b.runFull(ctx, "stop")
	if err == nil {
		b.keepLog()
		_, err = b.run(ctx, "clean")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: closing the kafka-local broker: %v\n", err)
	}
	if b.watchdog != nil {
		_, _ = b.watchW.WriteString("done\n")
		b.watchW.Close()
		done := make(chan struct{})
		go func() {
			_ = b.watchdog.Wait()
			close(done)
		}()
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			_ = b.watchdog.Process.Kill()
			<-done
		}
	}
}
