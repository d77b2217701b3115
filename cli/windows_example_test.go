package cli

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/broker"
	"github.com/pipeline-run/pipeline/offsets"
)

// runExample runs an example file as the README does, smaller and on an
// embedded broker the test reads afterwards, and returns a reader of its
// topics.
func runExample(t *testing.T, file string, replace map[string]string) func(topic string) []*kgo.Record {
	t.Helper()
	data, err := os.ReadFile("../examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	body := string(data)
	replace["brokers: embedded"] = "brokers: [" + b.Addrs()[0] + "]"
	for old, new := range replace {
		if !strings.Contains(body, old) {
			t.Fatalf("%s no longer has %q; update the test", file, old)
		}
		body = strings.Replace(body, old, new, 1)
	}
	code, out, errs := runCLI(t, "run", "-c", writeFile(t, body))
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func(topic string) []*kgo.Record {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		recs, err := offsets.ReadToEnd(ctx, cl, topic, true)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		return recs
	}
}

type minuteKey struct {
	sensor string
	start  int64
}

// TestWindowsExample runs examples/windows.yaml and checks it against the
// readings the feeder wrote: every reading of a minute that has a result is
// in that minute's last result or in the late output, never both, and the
// counts and means agree; the late output holds readings only.
func TestWindowsExample(t *testing.T) {
	read := runExample(t, "windows.yaml", map[string]string{"records: 20000": "records: 12000"})
	type reading struct {
		Sensor      string  `json:"sensor"`
		Temperature float64 `json:"temperature"`
		TS          int64   `json:"ts"`
		Seq         int     `json:"seq"`
	}
	type agg struct {
		n   int
		sum float64
	}
	all := map[minuteKey]*agg{}
	bySeq := map[int]reading{}
	for _, r := range read("sensor-readings") {
		var in reading
		if json.Unmarshal(r.Value, &in) != nil {
			continue
		}
		k := minuteKey{in.Sensor, in.TS - in.TS%60000}
		if all[k] == nil {
			all[k] = &agg{}
		}
		all[k].n++
		all[k].sum += in.Temperature
		bySeq[in.Seq] = in
	}
	late := map[minuteKey]*agg{}
	lateRecs := read("sensor-late")
	for _, r := range lateRecs {
		var in reading
		if err := json.Unmarshal(r.Value, &in); err != nil {
			t.Fatalf("late output %s: %v", r.Value, err)
		}
		if bySeq[in.Seq] != in {
			t.Fatalf("late output %s is no reading the feeder wrote", r.Value)
		}
		k := minuteKey{in.Sensor, in.TS - in.TS%60000}
		if late[k] == nil {
			late[k] = &agg{}
		}
		late[k].n++
		late[k].sum += in.Temperature
	}
	type result struct {
		Key      string  `json:"key"`
		Start    int64   `json:"window_start"`
		End      int64   `json:"window_end"`
		Timing   string  `json:"timing"`
		Readings int     `json:"readings"`
		Mean     float64 `json:"mean"`
	}
	final := map[minuteKey]result{}
	onTime := map[minuteKey]int{}
	for _, r := range read("sensor-averages") {
		var res result
		if err := json.Unmarshal(r.Value, &res); err != nil {
			t.Fatalf("result %s: %v", r.Value, err)
		}
		k := minuteKey{res.Key, res.Start}
		if res.End != res.Start+60000 || string(r.Key) != res.Key {
			t.Fatalf("result %s under key %q", r.Value, r.Key)
		}
		if res.Timing == "on_time" {
			onTime[k]++
		}
		final[k] = res
	}
	if len(final) < 200 || len(lateRecs) == 0 {
		t.Fatalf("%d windows closed and %d readings were late: the example shows too little", len(final), len(lateRecs))
	}
	for k, res := range final {
		want, l := all[k], late[k]
		if l == nil {
			l = &agg{}
		}
		if onTime[k] > 1 {
			t.Errorf("%v: %d on_time results", k, onTime[k])
		}
		mean := (want.sum - l.sum) / float64(want.n-l.n)
		if res.Readings != want.n-l.n || math.Abs(res.Mean-mean) > 1e-9*mean {
			t.Errorf("%v: last result %+v; the input has %d readings, %d of them late, mean %v", k, res, want.n, l.n, mean)
		}
	}
	t.Logf("%d windows with results, %d late readings", len(final), len(lateRecs))
}

// TestSessionsExample runs examples/sessions.yaml: each user's sessions are
// at least the gap apart and never overlap, and every click the feeder
// wrote (not broken) is in exactly one session or in one still open.
func TestSessionsExample(t *testing.T) {
	read := runExample(t, "sessions.yaml", map[string]string{"records: 20000": "records: 6000"})
	type click struct {
		User string `json:"user"`
		TS   int64  `json:"ts"`
	}
	clicks := map[string][]int64{}
	total := 0
	for _, r := range read("clicks") {
		var c click
		if json.Unmarshal(r.Value, &c) != nil || c.User == "" {
			continue
		}
		clicks[c.User] = append(clicks[c.User], c.TS)
		total++
	}
	type session struct {
		Key    string `json:"key"`
		Start  int64  `json:"window_start"`
		End    int64  `json:"window_end"`
		Clicks int    `json:"clicks"`
	}
	byUser := map[string][]session{}
	counted := 0
	for _, r := range read("user-sessions") {
		var s session
		if err := json.Unmarshal(r.Value, &s); err != nil {
			t.Fatal(err)
		}
		byUser[s.Key] = append(byUser[s.Key], s)
		counted += s.Clicks
	}
	if counted == 0 || counted > total {
		t.Fatalf("%d clicks in sessions, %d written", counted, total)
	}
	const gap = 180_000
	for user, ss := range byUser {
		for i, s := range ss {
			in := 0
			for _, ts := range clicks[user] {
				if ts >= s.Start && ts < s.End {
					in++
				}
			}
			if in != s.Clicks || s.End-s.Start < gap {
				t.Errorf("%s session %+v: %d clicks of the input in it", user, s, in)
			}
			for _, o := range ss[:i] {
				if o.Start < s.End && s.Start < o.End {
					t.Errorf("%s: sessions %+v and %+v overlap", user, o, s)
				}
			}
		}
	}
	t.Logf("%d of %d clicks in %d users' closed sessions", counted, total, len(byUser))
}
