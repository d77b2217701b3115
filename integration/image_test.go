package integration

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// imageGrace is how long a stopped container gets between SIGTERM and
// SIGKILL, as terminationGracePeriodSeconds does in deploy/.
const imageGrace = 30 * time.Second

// TestTheShippedImage runs the image scripts/image.sh builds (FROM scratch,
// static binary, non-root) through testcontainers-go against the suite's
// real Kafka: a pass-through and a keyed aggregate on pebble state, each
// SIGKILLed mid-stream and restarted (the same container, so the same
// instance id and state volume, as a StatefulSet's pod), then stopped with
// SIGTERM, which must end in exit status 0 within the grace period. Every
// start waits for readiness the way Kubernetes does: `pipeline health
// --ready` in the container, the image's HEALTHCHECK. The outputs are
// checked exactly: the pass-through by the checker and the audit, the
// counts against the input.
func TestTheShippedImage(t *testing.T) {
	b := requireBroker(t)
	switch b.Kind() {
	case "kafka-local", "external":
	default:
		t.Skipf("the image runs against real Apache Kafka (the last step of scripts/test.sh); this run's broker is %s", b.Kind())
	}
	img := requireImage(t)
	t.Logf("image %s through podman's Docker API (%s)", img.image, os.Getenv("DOCKER_HOST"))

	t.Run("pass-through", func(t *testing.T) {
		e := newEnv(t)
		const partitions, records, keys = 4, 60_000, 500
		CreateTopics(t, e.adm, partitions, e.input, e.output)
		cfgPath := e.config(partitions).Write(t, e.logDir)
		runImageKill(t, e, img, cfgPath, records, keys)
		CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
		e.audit(cfgPath, records)
	})
	t.Run("keyed-aggregate", func(t *testing.T) {
		e := newEnv(t)
		const partitions, records, keys = 4, 60_000, 2_000
		CreateTopics(t, e.adm, partitions, e.input, e.output)
		// The image's state directory, in the container's own file system:
		// it outlives a stop and start of the container, as a volume does.
		body := countConfig(e, partitions, "state: {backend: pebble, dir: /var/lib/pipeline/state}\n")
		cfgPath := filepath.Join(e.logDir, "count.yaml")
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		runImageKill(t, e, img, cfgPath, records, keys)
		checkCounts(t, e, records, keys)
	})
}

// runImageKill feeds records over keys into the input while the container
// runs the pipeline of cfgPath: ready, SIGKILL mid-stream, start again,
// ready, drain, SIGTERM.
func runImageKill(t *testing.T, e *env, img *imageEngine, cfgPath string, records, keys int) {
	rng := rand.New(rand.NewPCG(e2eSeed(t), 0))
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: records / 10})
	start := time.Now()
	c := img.run(t, cfgPath)
	t.Logf("container ready after %v", time.Since(start).Round(time.Millisecond))

	time.Sleep(minStopDelay + time.Duration(rng.Int64N(int64(2*time.Second))))
	c.kill(t)
	var committed int64
	WaitFor(t, 30*time.Second, "the group's committed offsets after the SIGKILL", func() (bool, string) {
		n, _, err := e.committed()
		committed = n
		return err == nil, fmt.Sprint(err)
	})
	if committed == 0 || committed >= int64(records) {
		t.Fatalf("the SIGKILL came with %d of %d input records committed: not mid-stream", committed, records)
	}
	t.Logf("SIGKILL: exit status 137 with %d input records acked, %d committed", input.Acked(), committed)

	restarted := time.Now()
	c.start(t)
	t.Logf("restarted container ready after %v", time.Since(restarted).Round(time.Millisecond))
	input.Wait(t)
	end := e.inputEnd()
	WaitFor(t, drainBound, "the group's committed offsets to reach the input end", func() (bool, string) {
		if st := c.state(t); !st.Running {
			t.Fatalf("the container exited on its own (status %d) while draining:\n%s", st.ExitCode, c.logs(t, 40))
		}
		_, got, err := e.committed()
		return err == nil && offsetsReached(got, end), fmt.Sprintf("committed %v, input end %v (%v)", sorted(got), sorted(end), err)
	})
	took := c.term(t)
	t.Logf("SIGTERM: exit status 0 after %v; the run took %v", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// imageRun is one container of the image.
type imageRun struct {
	eng *imageEngine
	ctr *testcontainers.DockerContainer
}

// run creates and starts a container of the image with cfgPath as its
// config, on the host's network, and waits until it is ready.
func (img *imageEngine) run(t *testing.T, cfgPath string) *imageRun {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ctr, err := testcontainers.Run(ctx, img.image,
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithEnv(map[string]string{"PIPELINE_METRICS_LISTEN": "127.0.0.1:" + strconv.Itoa(port)}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Binds = []string{cfgPath + ":/etc/pipeline/pipeline.yaml:ro"}
		}),
		testcontainers.WithWaitStrategyAndDeadline(2*time.Minute,
			wait.ForExec([]string{"/pipeline", "health", "--ready"}).WithPollInterval(250*time.Millisecond)),
	)
	r := &imageRun{eng: img, ctr: ctr}
	if ctr != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("container log tail:\n%s", r.logs(t, 40))
			}
			if err := testcontainers.TerminateContainer(ctr); err != nil {
				t.Errorf("removing the container: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("running %s: %v", img.image, err)
	}
	return r
}

// start starts the stopped container again and waits until it is ready.
func (r *imageRun) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := r.ctr.Start(ctx); err != nil {
		t.Fatalf("starting the container again: %v", err)
	}
}

// kill sends SIGKILL and requires exit status 137 (128 + SIGKILL).
func (r *imageRun) kill(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), exitBound)
	defer cancel()
	if st := r.state(t); !st.Running {
		t.Fatalf("the container is not running (%s, status %d) when it should be SIGKILLed:\n%s", st.Status, st.ExitCode, r.logs(t, 40))
	}
	id := r.ctr.GetContainerID()
	if _, err := r.eng.docker.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("SIGKILL to the container: %v", err)
	}
	w := r.eng.docker.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case res := <-w.Result:
		if res.StatusCode != 137 {
			t.Fatalf("the container was sent SIGKILL but exited with status %d", res.StatusCode)
		}
	case err := <-w.Error:
		t.Fatalf("waiting for the killed container: %v", err)
	}
}

// term stops the container with SIGTERM, SIGKILL after imageGrace, and
// requires exit status 0 before the grace period ended.
func (r *imageRun) term(t *testing.T) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), imageGrace+exitBound)
	defer cancel()
	start := time.Now()
	grace := imageGrace
	if err := r.ctr.Stop(ctx, &grace); err != nil {
		t.Fatalf("stopping the container: %v", err)
	}
	took := time.Since(start)
	st := r.state(t)
	if st.Running || st.ExitCode != 0 || st.OOMKilled {
		t.Fatalf("after SIGTERM the container is %s with exit status %d (OOM-killed %v) after %v; want exit status 0 within %v:\n%s",
			st.Status, st.ExitCode, st.OOMKilled, took, imageGrace, r.logs(t, 40))
	}
	return took
}

func (r *imageRun) state(t *testing.T) *container.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := r.ctr.State(ctx)
	if err != nil {
		t.Fatalf("the container's state: %v", err)
	}
	return st
}

// logs returns the last n lines of the container's output.
func (r *imageRun) logs(t *testing.T, n int) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	rc, err := r.ctr.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Sprintf("(reading the logs: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
