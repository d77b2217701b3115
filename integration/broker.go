package integration

import (
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Broker is the Kafka-protocol broker a test package runs against.
//
// Stop, Kill and Start are faults a test may inject; a broker the suite does
// not own (CanRestart false) returns ErrCannotRestart from them. Start after
// Stop or Kill brings the broker back on the same address with its data.
// Close releases everything the broker holds and is safe to call twice.
type Broker interface {
	// Addr is the bootstrap address, host:port[,host:port...].
	Addr() string
	// Kind names the provider: "external", "kafka-local",
	// "testcontainers" or "kfake-process".
	Kind() string
	// Version describes the broker software as well as it can be known.
	Version() string
	// Stop asks the broker to shut down cleanly and waits for it.
	Stop(ctx context.Context) error
	// Kill ends the broker abruptly (SIGKILL) and waits for it.
	Kill() error
	// Start restarts a stopped or killed broker, keeping its data.
	Start(ctx context.Context) error
	CanRestart() bool
	Close()
}

// suiteTxnMaxTimeout is the transaction.max.timeout.ms of every broker the
// suite starts, set in the broker's own configuration (server.properties),
// not Kafka's default: the start-up check must find what each broker
// enforces, and a default would hide a check that reads nothing.
const suiteTxnMaxTimeout = 2 * time.Minute

// suiteTxnAbortCheck has the suite's Kafka brokers look for transactions
// past their time-out every second rather than every 10 s (Kafka's
// default), so that a test's short transactions.timeout bites when it
// passes, as it does on a busy production cluster sooner or later.
const suiteTxnAbortCheck = "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"

// ErrCannotRestart is returned by Stop, Kill and Start of a broker the suite
// does not run itself.
var ErrCannotRestart = errors.New("the suite cannot restart this broker")

// errNotApplicable marks a provider that does not apply in this
// environment, so the next one is tried.
var errNotApplicable = errors.New("not applicable")

// brokerEnv is what a provider may use to start a broker.
type brokerEnv struct {
	// bin is the built pipeline binary, "" when it was not built.
	bin string
	// dir is a scratch directory owned by the caller, for data and logs.
	dir string
}

type brokerProvider struct {
	kind  string
	start func(ctx context.Context, env brokerEnv) (Broker, error)
}

// brokerProviders are tried in order; the first that applies is the broker
// for the whole run. A provider that applies but fails stops the run rather
// than falling through, so nobody believes they tested on a broker they did
// not get.
//
//  1. external: KAFKA_BOOTSTRAP is set. Someone else runs it; no restarts.
//  2. kafka-local: KAFKA_LOCAL=1 runs Apache Kafka in KRaft mode from its
//     published jars with the machine's Java through scripts/kafka-local.sh
//     (broker_kafkalocal.go). Its exit status 3 (no Java or Maven) fails the
//     run like any other error: KAFKA_LOCAL=1 asked for a real broker.
//  3. testcontainers: Apache Kafka's official image in a container where a
//     Docker engine answers (broker_testcontainers.go);
//     INTEGRATION_NO_DOCKER=1 turns it off. Restartable.
//  4. kfake-process: `pipeline broker` (franz-go kfake) as a child process
//     with a persistent data dir; restartable.
//
// A new provider is one entry here: its start function returns
// errNotApplicable (wrapped, with the reason) when its trigger is absent.
var brokerProviders = []brokerProvider{
	{"external", startExternal},
	{"kafka-local", startKafkaLocal},
	{"testcontainers", startTestcontainers},
	{"kfake-process", startKfakeProcess},
}

// startBroker returns the first applicable broker, or an error listing why
// each provider did not apply.
func startBroker(ctx context.Context, env brokerEnv) (Broker, error) {
	var skipped []string
	for _, p := range brokerProviders {
		b, err := p.start(ctx, env)
		switch {
		case err == nil:
			return b, nil
		case errors.Is(err, errNotApplicable):
			skipped = append(skipped, fmt.Sprintf("%s: %v", p.kind, err))
		default:
			return nil, fmt.Errorf("starting the %s broker: %w", p.kind, err)
		}
	}
	return nil, fmt.Errorf("no broker: %s", strings.Join(skipped, "; "))
}

// Seeds splits a broker's address into seed brokers for a client.
func Seeds(b Broker) []string { return strings.Split(b.Addr(), ",") }

// protocolVersion asks the broker's ApiVersions which Kafka release it
// most resembles.
func protocolVersion(ctx context.Context, seeds []string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	vs, err := kadm.NewClient(cl).ApiVersions(ctx)
	if err != nil {
		return "", err
	}
	var guesses []string
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			return "", fmt.Errorf("ApiVersions of broker %d: %w", v.NodeID, v.Err)
		}
		guesses = append(guesses, v.VersionGuess())
	}
	return strings.Join(guesses, ","), nil
}

// external is a broker run by someone else, named by KAFKA_BOOTSTRAP.
type external struct {
	addr, version string
}

func startExternal(ctx context.Context, _ brokerEnv) (Broker, error) {
	addr := os.Getenv("KAFKA_BOOTSTRAP")
	if addr == "" {
		return nil, fmt.Errorf("%w: KAFKA_BOOTSTRAP is not set", errNotApplicable)
	}
	v, err := protocolVersion(ctx, strings.Split(addr, ","))
	if err != nil {
		return nil, fmt.Errorf("reaching KAFKA_BOOTSTRAP=%s: %w", addr, err)
	}
	return &external{addr: addr, version: "Kafka protocol ~" + v}, nil
}

func (e *external) Addr() string                { return e.addr }
func (e *external) Kind() string                { return "external" }
func (e *external) Version() string             { return e.version }
func (e *external) Stop(context.Context) error  { return ErrCannotRestart }
func (e *external) Kill() error                 { return ErrCannotRestart }
func (e *external) Start(context.Context) error { return ErrCannotRestart }
func (e *external) CanRestart() bool            { return false }
func (e *external) Close()                      {}

// readyBound is how long a broker process may take to print its ready line.
const readyBound = 30 * time.Second

// kfakeProcess runs `pipeline broker` as a child process, so the pipeline
// can be killed while the broker lives, and the broker killed while its data
// dir survives. It keeps its port across restarts: clients and pipeline
// configs hold the address.
type kfakeProcess struct {
	bin, dataDir, logDir string
	port                 int
	version              string

	mu     sync.Mutex
	proc   *child // nil while stopped
	starts int
	closed bool
}

func startKfakeProcess(ctx context.Context, env brokerEnv) (Broker, error) {
	if env.bin == "" {
		return nil, fmt.Errorf("%w: the pipeline binary was not built", errNotApplicable)
	}
	b := &kfakeProcess{
		bin:     env.bin,
		dataDir: filepath.Join(env.dir, "broker-data"),
		logDir:  env.dir,
	}
	// A free port found by listening can be taken by someone else before the
	// broker binds it; a fresh port on a failed first start covers that race.
	var err error
	for range 3 {
		if b.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = b.Start(ctx); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	// No ApiVersions guess here: kfake advertises its own mix of versions,
	// and the guess it yields (an ancient Kafka) would mislead.
	b.version = "kfake " + moduleVersion(env.bin, "github.com/twmb/franz-go/pkg/kfake")
	return b, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// moduleVersion reads the version of a dependency linked into a binary.
func moduleVersion(bin, module string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "(unknown version)"
	}
	for _, d := range info.Deps {
		if d.Path == module {
			if d.Replace != nil {
				return d.Replace.Version + " (replaced)"
			}
			return d.Version
		}
	}
	return "(not in binary)"
}

func (b *kfakeProcess) Addr() string     { return "127.0.0.1:" + strconv.Itoa(b.port) }
func (b *kfakeProcess) Kind() string     { return "kfake-process" }
func (b *kfakeProcess) Version() string  { return b.version }
func (b *kfakeProcess) CanRestart() bool { return true }

// Start starts the broker process and waits for its ready line.
func (b *kfakeProcess) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("broker is closed")
	}
	if b.proc != nil && !b.proc.exited() {
		return fmt.Errorf("broker already running (pid %d)", b.proc.pid())
	}
	b.starts++
	logPath := filepath.Join(b.logDir, fmt.Sprintf("broker-%d.log", b.starts))
	c, err := startChild("broker", logPath, b.bin, "broker", "--port", strconv.Itoa(b.port), "--data-dir", b.dataDir,
		"--txn-max-timeout-ms", strconv.Itoa(int(suiteTxnMaxTimeout.Milliseconds())))
	if err != nil {
		return err
	}
	b.proc = c
	ready := "broker listening on " + b.Addr()
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	err = poll(ctx, func() (bool, error) {
		if fileContains(logPath, ready) {
			return true, nil
		}
		if c.exited() {
			return false, fmt.Errorf("broker exited (%v) before printing %q", c.state, ready)
		}
		return false, nil
	})
	if err != nil {
		c.forceStop()
		b.proc = nil
		return fmt.Errorf("%w; log tail:\n%s", err, tailFile(logPath, 30))
	}
	return nil
}

// Stop sends SIGTERM and requires exit status 0.
func (b *kfakeProcess) Stop(ctx context.Context) error {
	c, err := b.running()
	if err != nil {
		return err
	}
	bound := exitBound
	if d, ok := ctx.Deadline(); ok {
		bound = time.Until(d)
	}
	state, err := c.signal(syscall.SIGTERM, bound)
	if err != nil {
		return err
	}
	if state.ExitCode() != 0 {
		return fmt.Errorf("broker exited with %q after SIGTERM, want exit status 0; log tail:\n%s", state, tailFile(c.log, 30))
	}
	return nil
}

// Kill sends SIGKILL and requires the wait status to show it fired.
func (b *kfakeProcess) Kill() error {
	c, err := b.running()
	if err != nil {
		return err
	}
	state, err := c.signal(syscall.SIGKILL, exitBound)
	if err != nil {
		return err
	}
	if ok, status := killedBySIGKILL(state); !ok {
		return fmt.Errorf("broker was sent SIGKILL but its wait status is %q", status)
	}
	return nil
}

func (b *kfakeProcess) running() (*child, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return nil, errors.New("broker is not running")
	}
	return b.proc, nil
}

// LogTail returns the end of the current broker process's log.
func (b *kfakeProcess) LogTail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		return "(broker not running)"
	}
	return tailFile(b.proc.log, n)
}

// Close stops the broker, by SIGTERM if it obliges in time, else SIGKILL.
func (b *kfakeProcess) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.proc == nil {
		return
	}
	if !b.proc.exited() {
		if _, err := b.proc.signal(syscall.SIGTERM, 10*time.Second); err != nil {
			b.proc.forceStop()
		}
	}
	b.proc = nil
}

// logTailer is implemented by brokers whose logs the suite holds.
type logTailer interface{ LogTail(n int) string }

// moduleRoot returns the repository's root, the directory of the pipeline
// module that holds cmd/pipeline and scripts/ (the suite is a module of
// its own below it).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "pipeline", "main.go")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no cmd/pipeline/main.go above the working directory")
		}
		dir = parent
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
