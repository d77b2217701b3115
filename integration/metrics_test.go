package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMetricsOfAPausedProcess scrapes a running pipeline process's /metrics
// while it is paused (SIGSTOP) twice mid-stream:
//
//   - for 5.5 s, under the transaction timeout (10 s): the transaction open across
//     the pause shows its age, and the checkpoint that commits it shows a
//     duration over 5 s; the lag built up meanwhile shows, and falls to 0
//     once the input is drained;
//   - for longer than the transaction timeout: the broker aborts the open
//     transaction, the pipeline finds itself fenced when it resumes, and the
//     aborted checkpoint and the rebuilt client are counted.
//
// The output is exact throughout.
func TestMetricsOfAPausedProcess(t *testing.T) {
	requireBinary(t)
	e := newEnv(t)
	const partitions, keys = 3, 300
	const records = 60_000
	CreateTopics(t, e.adm, partitions, e.input, e.output)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cfg := e.config(partitions)
	cfg.CheckpointTimeout = 3 * time.Second
	cfg.TxnTimeout = 10 * time.Second
	cfgPath := filepath.Join(e.logDir, "paused.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.YAML()+fmt.Sprintf("metrics: {listen: %q}\n", addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	input := StartInput(t, e.seeds, InputSpec{Topic: e.input, Records: records, Keys: keys, Rate: records / 40})
	p := e.startPipeline(cfgPath)
	WaitFor(t, time.Minute, "/readyz to answer 200", func() (bool, string) {
		code, body, err := get(t.Context(), "http://"+addr+"/readyz")
		return err == nil && code == 200, fmt.Sprintf("%d %q %v", code, body, err)
	})
	WaitFor(t, time.Minute, "three committed checkpoints", func() (bool, string) {
		m, err := scrape(t.Context(), addr)
		return err == nil && m[`pipeline_checkpoints_total{outcome="committed"}`] >= 3, fmt.Sprint(err)
	})

	// Pause 1: under the transaction timeout.
	const pause1 = 5500 * time.Millisecond
	atStop := mustScrape(t, addr)
	resumed := pauseProcess(t, p, addr, pause1)
	if resumed[`pipeline_checkpoints_total{outcome="committed"}`] == atStop[`pipeline_checkpoints_total{outcome="committed"}`] && atStop[metricTxnOpen] > 0 {
		// No commit came between the two scrapes: the transaction open at
		// the first one was open all through the pause.
		if age := resumed[metricTxnOpen]; age < pause1.Seconds() {
			t.Fatalf("%s is %.3f s right after a pause of %v with the same transaction open", metricTxnOpen, age, pause1)
		}
	}
	lag := lagSum(resumed)
	t.Logf("pause 1 (%v): right after, %s %.3f s (before: %.3f s), lag %.0f records (before: %.0f)",
		pause1, metricTxnOpen, resumed[metricTxnOpen], atStop[metricTxnOpen], lag, lagSum(atStop))
	if lag == 0 {
		t.Fatalf("no consumer lag right after a pause of %v with input flowing at %d records/s", pause1, records/40)
	}
	// The checkpoint that spanned the pause lasted longer than it; none
	// before did (the test reads the histogram's bucket above 5.12 s).
	long := func(m map[string]float64) float64 {
		return m[`pipeline_checkpoint_duration_seconds_bucket{le="+Inf"}`] - m[`pipeline_checkpoint_duration_seconds_bucket{le="5.12"}`]
	}
	if long(atStop) != 0 {
		t.Fatalf("%v checkpoints lasted over 5.12 s before any pause", long(atStop))
	}
	WaitFor(t, 30*time.Second, "the checkpoint across the pause to commit and show its duration", func() (bool, string) {
		m, err := scrape(t.Context(), addr)
		return err == nil && long(m) == 1 && m[metricTxnOpen] < 2, fmt.Sprintf("%v checkpoints over 5.12 s, %s %v (%v)", long(m), metricTxnOpen, m[metricTxnOpen], err)
	})
	// Counted from the scrape before the pause: what aborted before it
	// (a produce the broker asked to retry at start-up, say) is not the
	// pause's doing.
	if m := mustScrape(t, addr); m[`pipeline_checkpoints_total{outcome="aborted"}`] != atStop[`pipeline_checkpoints_total{outcome="aborted"}`] {
		t.Fatalf("%v checkpoints aborted after a pause under the transaction timeout (%v before it)",
			m[`pipeline_checkpoints_total{outcome="aborted"}`]-atStop[`pipeline_checkpoints_total{outcome="aborted"}`], atStop[`pipeline_checkpoints_total{outcome="aborted"}`])
	}

	// Pause 2: past the transaction timeout (the broker looks for expired
	// transactions every second in this suite).
	pause2 := cfg.TxnTimeout + 4*time.Second
	before := mustScrape(t, addr)
	pauseProcess(t, p, addr, pause2)
	WaitFor(t, time.Minute, "the aborted checkpoint and the rebuilt client to be counted", func() (bool, string) {
		m, err := scrape(t.Context(), addr)
		aborted := m[`pipeline_checkpoints_total{outcome="aborted"}`] - before[`pipeline_checkpoints_total{outcome="aborted"}`]
		rebuilt := m["pipeline_client_rebuilds_total"] - before["pipeline_client_rebuilds_total"]
		return err == nil && aborted >= 1 && rebuilt >= 1, fmt.Sprintf("%v aborted, %v rebuilds since the pause (%v)", aborted, rebuilt, err)
	})

	input.Wait(t)
	e.waitInputCommitted(t, e.inputEnd(), p)
	WaitFor(t, 30*time.Second, "the consumer lag to fall to 0", func() (bool, string) {
		m, err := scrape(t.Context(), addr)
		n := 0
		for k := range m {
			if strings.HasPrefix(k, metricLagPrefix) {
				n++
			}
		}
		return err == nil && n == partitions && lagSum(m) == 0, fmt.Sprintf("%d partitions, lag %v (%v)", n, lagSum(m), err)
	})
	final := mustScrape(t, addr)
	var series []string
	for _, k := range slices.Sorted(maps.Keys(final)) {
		if strings.HasPrefix(k, "pipeline_") && !strings.Contains(k, "_bucket{") {
			series = append(series, fmt.Sprintf("%s %g", k, final[k]))
		}
	}
	t.Logf("the last scrape:\n%s", strings.Join(series, "\n"))
	p.Term()
	t.Logf("figures: committed %v, aborted %v, client rebuilds %v, checkpoints over 5.12 s %v, source records %v, sink records %v",
		final[`pipeline_checkpoints_total{outcome="committed"}`], final[`pipeline_checkpoints_total{outcome="aborted"}`],
		final["pipeline_client_rebuilds_total"], long(final),
		final[`pipeline_source_records_total{source="in"}`], final[`pipeline_sink_records_total{sink="out"}`])
	CheckRun(t, e.seeds, CheckSpec{Input: e.input, Output: e.output, Group: e.group, InputRecords: records})
}

const (
	metricTxnOpen   = "pipeline_transaction_open_seconds"
	metricLagPrefix = "pipeline_consumer_lag_records{"
)

// pauseProcess stops p with SIGSTOP for d, checks that it stopped (its state in
// /proc, and a scrape sent meanwhile is not answered), resumes it with
// SIGCONT and returns that scrape's answer.
func pauseProcess(t *testing.T, p *Process, addr string, d time.Duration) map[string]float64 {
	t.Helper()
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	stopped := time.Now()
	WaitFor(t, 5*time.Second, "the process to be stopped", func() (bool, string) {
		st, err := procState(p.Pid())
		return st == 'T', fmt.Sprintf("state %c (%v)", st, err)
	})
	type answer struct {
		m   map[string]float64
		err error
		at  time.Time
	}
	ch := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
		defer cancel()
		m, err := scrape(ctx, addr)
		ch <- answer{m, err, time.Now()}
	}()
	time.Sleep(d - time.Since(stopped))
	select {
	case a := <-ch:
		t.Fatalf("a scrape was answered %v into the pause (%v): the process was not stopped", a.at.Sub(stopped), a.err)
	default:
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatalf("the scrape sent during the pause: %v", a.err)
	}
	t.Logf("paused for %v; the scrape sent meanwhile was answered %v after the SIGSTOP", d, a.at.Sub(stopped).Round(time.Millisecond))
	return a.m
}

func lagSum(m map[string]float64) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, metricLagPrefix) {
			n += v
		}
	}
	return n
}

func mustScrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	m, err := scrape(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// scrape reads /metrics into series → value, a series written as the
// exposition format writes it: name{label="value",…}.
func scrape(ctx context.Context, addr string) (map[string]float64, error) {
	code, body, err := get(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /metrics: %d %s", code, body)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

func get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
