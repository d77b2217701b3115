package integration

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaImage is the official Apache Kafka image the testcontainers provider
// runs, pinned to the release scripts/kafka-local.sh runs (a test keeps the
// two in step). KAFKA_IMAGE overrides it.
const kafkaImage = "apache/kafka:4.4.0"

// containerStartBound covers pulling the image on first use.
const containerStartBound = 5 * time.Minute

// dockerSocket is where a local Docker engine listens by default.
const dockerSocket = "/var/run/docker.sock"

// containerKafka is Apache Kafka (KRaft, one combined broker and
// controller) in a container started with testcontainers-go, once per test
// package.
//
// The client port is bound to the same port number on the Docker host as
// inside the container, and advertised as such, so the address survives a
// container stop and start (a port Docker picks would change) and the
// restarts can be faults like on the other providers. Inter-broker traffic
// (transaction markers) uses a listener of its own inside the container.
//
// Stop is `docker stop` (SIGTERM, then SIGKILL after a grace period) and
// requires the container not to have needed the SIGKILL; Kill is `docker
// kill` and requires exit status 137 (128 + SIGKILL) from the container's
// state.
type containerKafka struct {
	ctr     *testcontainers.DockerContainer
	docker  *testcontainers.DockerClient
	host    string
	port    int
	image   string
	version string

	mu     sync.Mutex
	closed bool
}

func startTestcontainers(ctx context.Context, _ brokerEnv) (Broker, error) {
	if os.Getenv("INTEGRATION_NO_DOCKER") == "1" {
		return nil, fmt.Errorf("%w: INTEGRATION_NO_DOCKER=1", errNotApplicable)
	}
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat(dockerSocket); err != nil {
			return nil, fmt.Errorf("%w: no Docker engine (DOCKER_HOST is not set and %s does not exist)", errNotApplicable, dockerSocket)
		}
	}
	// Asking whether Docker answers must not hang the run: a socket file
	// with nobody behind it is common (Docker Desktop stopped).
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	docker, err := testcontainers.NewDockerClientWithOpts(pctx)
	if err != nil {
		return nil, fmt.Errorf("%w: no Docker engine answers: %v", errNotApplicable, err)
	}
	if _, err := docker.Ping(pctx, client.PingOptions{}); err != nil {
		docker.Close()
		return nil, fmt.Errorf("%w: the Docker engine at %s does not answer: %v", errNotApplicable, docker.DaemonHost(), err)
	}

	b := &containerKafka{docker: docker, image: kafkaImage}
	if img := os.Getenv("KAFKA_IMAGE"); img != "" {
		b.image = img
	}
	if b.host, err = daemonHost(ctx); err != nil {
		docker.Close()
		return nil, err
	}
	ctx, cancel = context.WithTimeout(ctx, containerStartBound)
	defer cancel()
	// The port is free here, which is the Docker host only for a local
	// engine; a fresh one on a failed start covers both a race and a port
	// taken on a remote Docker host.
	for range 3 {
		if b.port, err = freePort(); err != nil {
			break
		}
		if err = b.run(ctx); err == nil {
			break
		}
	}
	if err != nil {
		docker.Close()
		return nil, fmt.Errorf("starting %s: %w", b.image, err)
	}
	if v, err := protocolVersion(ctx, Seeds(b)); err == nil {
		b.version = b.image + " (Kafka protocol ~" + v + ")"
	} else {
		b.version = b.image
	}
	return b, nil
}

// daemonHost is the host the Docker engine publishes container ports on.
func daemonHost(ctx context.Context) (string, error) {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", fmt.Errorf("docker provider: %w", err)
	}
	defer p.Close()
	return p.DaemonHost(ctx)
}

// run creates and starts the container.
func (b *containerKafka) run(ctx context.Context) error {
	port := strconv.Itoa(b.port)
	clientPort := network.MustParsePort(port + "/tcp")
	bindIP := netip.IPv4Unspecified()
	if b.host == "localhost" || b.host == "127.0.0.1" {
		bindIP = netip.MustParseAddr("127.0.0.1")
	}
	ctr, err := testcontainers.Run(ctx, b.image,
		testcontainers.WithEnv(map[string]string{
			// The same single-node settings as scripts/kafka-local.sh.
			"CLUSTER_ID":                           "pipeline-integration-" + randomHex(1),
			"KAFKA_NODE_ID":                        "1",
			"KAFKA_PROCESS_ROLES":                  "broker,controller",
			"KAFKA_LISTENERS":                      "PLAINTEXT://0.0.0.0:" + port + ",BROKER://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
			"KAFKA_ADVERTISED_LISTENERS":           "PLAINTEXT://" + b.host + ":" + port + ",BROKER://127.0.0.1:9094",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_INTER_BROKER_LISTENER_NAME":     "BROKER",
			"KAFKA_CONTROLLER_LISTENER_NAMES":      "CONTROLLER",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":       "1@127.0.0.1:9093",

			"KAFKA_NUM_PARTITIONS":                                              "1",
			"KAFKA_DEFAULT_REPLICATION_FACTOR":                                  "1",
			"KAFKA_MIN_INSYNC_REPLICAS":                                         "1",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                            "1",
			"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                                "5",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":                    "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                               "1",
			"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":                        "5",
			"KAFKA_TRANSACTION_MAX_TIMEOUT_MS":                                  strconv.Itoa(int(suiteTxnMaxTimeout.Milliseconds())),
			"KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "1000",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR":            "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":                       "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                            "0",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                                   "false",
			"KAFKA_BROKER_HEARTBEAT_INTERVAL_MS":                                "1000",
			"KAFKA_BROKER_SESSION_TIMEOUT_MS":                                   "4000",
			"KAFKA_HEAP_OPTS":                                                   "-Xms256m -Xmx1g",
		}),
		testcontainers.WithExposedPorts(port+"/tcp"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{clientPort: {{HostIP: bindIP, HostPort: port}}}
		}),
		testcontainers.WithWaitStrategyAndDeadline(containerStartBound, wait.ForLog("Kafka Server started")),
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.WithoutCancel(ctx))
		}
		return err
	}
	// The log wait would match the first run's line at once after a
	// restart; Start waits for the broker itself instead.
	ctr.WaitingFor = nil
	b.ctr = ctr
	return nil
}

func (b *containerKafka) Addr() string     { return b.host + ":" + strconv.Itoa(b.port) }
func (b *containerKafka) Kind() string     { return "testcontainers" }
func (b *containerKafka) Version() string  { return b.version }
func (b *containerKafka) CanRestart() bool { return true }

// Start starts the stopped or killed container, keeping its data, and
// waits until the broker answers with itself in the metadata.
func (b *containerKafka) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("broker is closed")
	}
	if err := b.ctr.Start(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	return poll(ctx, func() (bool, error) {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		bs, err := adm.ListBrokers(rctx)
		return err == nil && len(bs) > 0, nil
	})
}

// Stop stops the container (SIGTERM, SIGKILL after 30 s) and requires it
// to have exited on the SIGTERM.
func (b *containerKafka) Stop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	grace := exitBound
	if err := b.ctr.Stop(ctx, &grace); err != nil {
		return err
	}
	st, err := b.ctr.State(ctx)
	if err != nil {
		return err
	}
	if st.Running || st.ExitCode == 137 || st.OOMKilled {
		return fmt.Errorf("broker container did not exit cleanly on SIGTERM: state %s, exit code %d, OOM-killed %v", st.Status, st.ExitCode, st.OOMKilled)
	}
	return nil
}

// Kill sends SIGKILL and requires exit status 137 (128 + SIGKILL).
func (b *containerKafka) Kill() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), exitBound)
	defer cancel()
	st, err := b.ctr.State(ctx)
	if err != nil {
		return err
	}
	if !st.Running {
		return fmt.Errorf("broker container is not running (state %s)", st.Status)
	}
	id := b.ctr.GetContainerID()
	if _, err := b.docker.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return err
	}
	w := b.docker.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case res := <-w.Result:
		if res.StatusCode != 137 {
			return fmt.Errorf("broker container was sent SIGKILL but exited with status %d", res.StatusCode)
		}
	case err := <-w.Error:
		return fmt.Errorf("waiting for the killed broker container: %w", err)
	}
	return nil
}

// Close removes the container and its data.
func (b *containerKafka) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	if err := testcontainers.TerminateContainer(b.ctr); err != nil {
		fmt.Fprintf(os.Stderr, "integration: removing the Kafka container: %v\n", err)
	}
	b.docker.Close()
}
