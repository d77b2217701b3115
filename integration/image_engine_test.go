package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// imageEngine is the shipped image and a Docker API to run it through
// testcontainers-go: podman's own API service (`podman system service`),
// set up once for the package by the project's scripts. No Docker engine
// runs here and no registry image can be pulled, so the image is the one
// scripts/image.sh builds FROM scratch, and the reaper container of
// testcontainers-go (a registry image) is off.
type imageEngine struct {
	image  string // the pipeline image, e.g. localhost/pipeline:it-…
	docker *testcontainers.DockerClient

	dir     string
	service *exec.Cmd
	done    chan struct{} // closed when the service has exited
	podman  []string      // the podman command, as scripts/container-env.sh sets it
	env     []string
}

var images struct {
	once sync.Once
	eng  *imageEngine
	err  error // why there is none
	// unavailable says err means podman cannot run here (a skip outside
	// CI), rather than a failure to set it up.
	unavailable bool
}

// errNoContainers marks a machine where no container engine can run.
var errNoContainers = errors.New("no container engine can run here")

// requireImage returns the image engine, setting it up on first use. Where
// podman cannot run the test is skipped with the reason, except under
// CI=true, where that is a failure.
func requireImage(t testing.TB) *imageEngine {
	t.Helper()
	images.once.Do(func() {
		images.eng, images.err = startImageEngine()
		images.unavailable = errors.Is(images.err, errNoContainers)
	})
	switch {
	case images.err == nil:
		return images.eng
	case images.unavailable && os.Getenv("CI") != "true":
		t.Skipf("the shipped image cannot run here: %v", images.err)
	}
	t.Fatalf("the shipped image: %v", images.err)
	return nil
}

func startImageEngine() (*imageEngine, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pipeline-image-")
	if err != nil {
		return nil, err
	}
	e := &imageEngine{dir: dir, image: "localhost/pipeline:it-" + randomHex(3)}
	e.env = append(os.Environ(), "PIPELINE_CONTAINER_DIR="+dir)
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()

	// scripts/container-env.sh installs podman and runc when it may, and
	// exits 3 when podman cannot run here.
	probe := exec.Command("sh", "-c", `. scripts/container-env.sh && echo "$container"`)
	probe.Dir, probe.Env = root, e.env
	out, err := probe.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return nil, fmt.Errorf("%w: scripts/container-env.sh: %s", errNoContainers, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("scripts/container-env.sh: %v: %s", err, errText(err))
	}
	e.podman = strings.Fields(strings.TrimSpace(string(out)))
	if len(e.podman) == 0 || e.podman[0] != "podman" {
		return nil, fmt.Errorf("%w: scripts/container-env.sh chose %q; these tests run podman's API service", errNoContainers, out)
	}
	e.env = append(e.env, "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"))

	build := exec.Command("scripts/image.sh", e.image)
	build.Dir, build.Env = root, e.env
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scripts/image.sh %s: %v\n%s", e.image, err, out)
	}

	sock := filepath.Join(dir, "podman.sock")
	args := append(append([]string{}, e.podman[1:]...), "system", "service", "--time=0", "unix://"+sock)
	e.service = exec.Command(e.podman[0], args...)
	e.service.Env = e.env
	logf, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		return nil, err
	}
	e.service.Stdout, e.service.Stderr = logf, logf
	if err := e.service.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w: podman system service: %v", errNoContainers, err)
	}
	e.done = make(chan struct{})
	go func() {
		_ = e.service.Wait()
		logf.Close()
		close(e.done)
	}()

	// testcontainers-go reads these once, at its first use in the process:
	// nothing in this package has used it yet when the broker is not its
	// own (requireImageBroker).
	os.Setenv("DOCKER_HOST", "unix://"+sock)
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := poll(ctx, func() (bool, error) {
		select {
		case <-e.done:
			return false, fmt.Errorf("podman system service exited:\n%s", tailFile(filepath.Join(dir, "service.log"), 20))
		default:
		}
		_, err := os.Stat(sock)
		return err == nil, nil
	}); err != nil {
		return nil, err
	}
	if e.docker, err = testcontainers.NewDockerClientWithOpts(ctx); err != nil {
		return nil, fmt.Errorf("a Docker API client for podman's service: %w", err)
	}
	if err := poll(ctx, func() (bool, error) {
		_, err := e.docker.Ping(ctx, client.PingOptions{})
		return err == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("podman's Docker API at %s does not answer: %w", sock, err)
	}
	suite.usedContainers.Store(true)
	ok = true
	return e, nil
}

// close stops the service and removes the image; TestMain calls it.
func (e *imageEngine) close() {
	if e.docker != nil {
		e.docker.Close()
	}
	if e.service != nil && e.service.Process != nil {
		_ = e.service.Process.Kill()
		<-e.done
	}
	if len(e.podman) > 0 {
		args := append(append([]string{}, e.podman[1:]...), "rmi", "-f", e.image)
		rmi := exec.Command(e.podman[0], args...)
		rmi.Env = e.env
		_ = rmi.Run()
	}
	os.RemoveAll(e.dir)
}

// closeImages releases what requireImage set up.
func closeImages() {
	if images.eng != nil {
		images.eng.close()
	}
}

// errText is the stderr an exec error carries, if any.
func errText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
