package cli

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
	"github.com/pipeline-run/pipeline/internal/engine"
	"github.com/pipeline-run/pipeline/offsets"
	"github.com/pipeline-run/pipeline/wire"
)

// demoRun is the built-in feeder of the quick start: it writes sensor
// readings to the demo topic at a set rate, waits until the pipeline has
// committed all of them, and reads the outputs back with read_committed.
type demoRun struct {
	cfg  *config.Config
	log  *slog.Logger
	cl   *kgo.Client // produces, and reads back read_committed
	adm  *kadm.Client
	sent int
	bad  int
}

// poisonEvery is how often the feeder writes a record that is not JSON, to
// show the dead-letter topic at work.
const poisonEvery = 2500

func newDemo(ctx context.Context, cfg *config.Config, seeds []string, log *slog.Logger) (*demoRun, error) {
	base, err := engine.ClientOpts(cfg, seeds, nil)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(base, kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, err
	}
	d := &demoRun{cfg: cfg, log: log.With("component", "demo"), cl: cl, adm: kadm.NewClient(cl)}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, t := range []struct{ path, topic string }{{"demo.topic", cfg.Demo.Topic}, {"demo.payments_topic", cfg.Demo.PaymentsTopic}, {"demo.customers_topic", cfg.Demo.CustomersTopic}, {"demo.limits_topic", cfg.Demo.LimitsTopic}} {
		if t.topic == "" {
			continue
		}
		resp, err := d.adm.CreateTopic(cctx, cfg.Demo.Partitions, cfg.Topics.ReplicationFactor, nil, t.topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			cl.Close()
			return nil, fmt.Errorf("%s: creating %q: %w", t.path, t.topic, err)
		}
	}
	return d, nil
}

func (d *demoRun) close() { d.cl.Close() }

type reading struct {
	Sensor      string  `json:"sensor"`
	Temperature float64 `json:"temperature"`
	TS          int64   `json:"ts"`
	Seq         int     `json:"seq"`
}

type click struct {
	User string `json:"user"`
	Page string `json:"page"`
	TS   int64  `json:"ts"`
	Seq  int    `json:"seq"`
}

type order struct {
	Order    string  `json:"order"`
	Customer string  `json:"customer"`
	Amount   float64 `json:"amount"`
	TS       int64   `json:"ts"`
	Seq      int     `json:"seq"`
}

type customer struct {
	Customer string `json:"customer"`
	Name     string `json:"name"`
	Tier     string `json:"tier"`
}

type payment struct {
	Order  string  `json:"order"`
	Amount float64 `json:"amount"`
	TS     int64   `json:"ts"`
}

// payments holds the payments the orders feeder has still to write, in
// event-time order.
type payments []payment

func (p payments) Len() int           { return len(p) }
func (p payments) Less(i, j int) bool { return p[i].TS < p[j].TS }
func (p payments) Swap(i, j int)      { p[i], p[j] = p[j], p[i] }
func (p *payments) Push(x any)        { *p = append(*p, x.(payment)) }
func (p *payments) Pop() any {
	old := *p
	x := old[len(old)-1]
	*p = old[:len(old)-1]
	return x
}

// demoEpoch is where the feeder's event time starts with demo.time_step.
var demoEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// eventTimes stamps the feeder's records: moving by demo.time_step per
// record (or the wall clock), with the share of out-of-order and late
// records demo asks for.
type eventTimes struct {
	dc            config.Demo
	rng           *rand.Rand
	first, latest int64
}

func (e *eventTimes) next(i int) int64 {
	ts := time.Now().UnixMilli()
	if e.dc.TimeStep > 0 {
		ts = demoEpoch + int64(i)*e.dc.TimeStep.Milliseconds()
	}
	if e.first == 0 {
		e.first = ts
	}
	e.latest = max(e.latest, ts)
	late := e.latest - (10 * time.Minute).Milliseconds()
	switch x := e.rng.IntN(100); {
	case x < e.dc.Late && late >= e.first:
		return late
	case x < e.dc.Late+e.dc.OutOfOrder:
		return e.latest - e.rng.Int64N(max(1, e.dc.Disorder.Milliseconds()))
	}
	return ts
}

// feedAndWait writes the demo records, then waits until the group has
// consumed and committed everything in topics, the pipeline's sources: the
// demo topic and the repartition topics of its key_by steps.
func (d *demoRun) feedAndWait(ctx context.Context, group string, topics []string) error {
	dc := d.cfg.Demo
	rng := rand.New(rand.NewPCG(uint64(dc.Seed), 0x5eed))
	d.log.Info("feeding the demo records", "kind", cmp.Or(dc.Kind, "readings"), "topic", dc.Topic, "records", dc.Records, "rate_per_s", dc.Rate)

	var failed error
	promise := func(_ *kgo.Record, err error) {
		if err != nil && failed == nil {
			failed = err
		}
	}
	// Pace in 10 ms slices; at low rates a slice may hold no record.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	times := &eventTimes{dc: dc, rng: rand.New(rand.NewPCG(uint64(dc.Seed), 0x71e))}
	pages := []string{"/", "/search", "/product", "/cart", "/checkout"}
	var due payments // orders kind: payments not written yet
	tiers := []string{"bronze", "silver", "gold"}
	row := func(id int, ts int64, tombstone bool) {
		c := fmt.Sprintf("customer-%02d", id)
		r := &kgo.Record{Topic: dc.CustomersTopic, Key: []byte(c), Timestamp: time.UnixMilli(ts)}
		if !tombstone {
			r.Value, _ = json.Marshal(customer{Customer: c, Name: fmt.Sprintf("Customer %d", id), Tier: tiers[rng.IntN(len(tiers))]})
		}
		d.cl.Produce(ctx, r, promise)
		d.sent++
	}
	limit := func(id, max int) {
		s := fmt.Sprintf("sensor-%02d", id)
		v, _ := json.Marshal(map[string]any{"sensor": s, "max": max})
		d.cl.Produce(ctx, &kgo.Record{Topic: dc.LimitsTopic, Key: []byte(s), Value: v}, promise)
		d.sent++
	}
	if dc.LimitsTopic != "" {
		for id := range dc.Sensors {
			limit(id, 30)
		}
	}
	if dc.Kind == "orders" && dc.CustomersTopic != "" {
		for id := range dc.Sensors {
			row(id, demoEpoch-time.Minute.Milliseconds(), false)
		}
	}
	pay := func(upTo int64) {
		for due.Len() > 0 && due[0].TS <= upTo {
			p := heap.Pop(&due).(payment)
			v, _ := json.Marshal(p)
			d.cl.Produce(ctx, &kgo.Record{Topic: dc.PaymentsTopic, Key: []byte(p.Order), Value: v}, promise)
			d.sent++
		}
	}
	for i := 0; i < dc.Records; i++ {
		if due := start.Add(time.Duration(float64(i) / float64(dc.Rate) * float64(time.Second))); time.Now().Before(due) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		sensor := fmt.Sprintf("sensor-%02d", rng.IntN(dc.Sensors))
		var value []byte
		switch {
		case (i+1)%poisonEvery == 0 && dc.Kind == "orders":
			sensor = fmt.Sprintf("order-%06d", i)
			value = []byte(`{"order": "` + sensor + `", "customer": `) // cut short: not JSON
			d.bad++
		case (i+1)%poisonEvery == 0:
			value = []byte(`{"sensor": "` + sensor + `", "temperature": `) // cut short: not JSON
			d.bad++
		case dc.Kind == "orders":
			sensor = fmt.Sprintf("order-%06d", i)
			o := order{Order: sensor, Customer: fmt.Sprintf("customer-%02d", rng.IntN(dc.Sensors)), Amount: float64(100+rng.IntN(10000)) / 100, TS: times.next(i), Seq: i}
			value, _ = json.Marshal(o)
			// Nine orders in ten are paid, 0 to 12 minutes later.
			if dc.PaymentsTopic != "" && rng.IntN(10) < 9 {
				heap.Push(&due, payment{Order: o.Order, Amount: o.Amount, TS: o.TS + rng.Int64N((12 * time.Minute).Milliseconds())})
			}
			pay(o.TS)
			if dc.CustomersTopic != "" && i%10 == 9 {
				row(rng.IntN(dc.Sensors), o.TS, rng.IntN(20) == 0)
			}
		case dc.Kind == "clicks":
			sensor = fmt.Sprintf("user-%02d", rng.IntN(dc.Sensors))
			value, _ = json.Marshal(click{User: sensor, Page: pages[rng.IntN(len(pages))], TS: times.next(i), Seq: i})
		default:
			value, _ = json.Marshal(reading{Sensor: sensor, Temperature: 10 + rng.Float64()*25, TS: times.next(i), Seq: i})
			if dc.LimitsTopic != "" && i%1000 == 999 {
				limit(rng.IntN(dc.Sensors), 20+rng.IntN(15))
			}
		}
		d.cl.Produce(ctx, &kgo.Record{Topic: dc.Topic, Key: []byte(sensor), Value: value}, promise)
		d.sent++
	}
	pay(math.MaxInt64)
	if err := d.cl.Flush(ctx); err != nil {
		return err
	}
	if failed != nil {
		return fmt.Errorf("demo feeder: %w", failed)
	}
	d.log.Info("all records written; waiting for the pipeline to commit them", "records", d.sent)
	for {
		done, err := d.consumed(ctx, group, topics)
		if err == nil && done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// consumed reports whether the group has committed, on every partition of
// topics, the offset after the last record there. The demo topic is
// written without transactions, so that is its end offset. A repartition
// topic is written in the pipeline's transactions and ends with a commit
// marker no consumer commits past: there, what is checked is that no
// record lies past the committed offset. The committed offsets are fetched
// before the topics are looked at, so records that a checkpoint committed
// meanwhile wrote to a repartition topic are seen and waited for.
func (d *demoRun) consumed(ctx context.Context, group string, topics []string) (bool, error) {
	committed, err := d.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return false, nil // nothing committed yet
	}
	if err != nil {
		return false, err
	}
	ends, err := d.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return false, err
	}
	if err := ends.Error(); err != nil {
		return false, err
	}
	var listed []kadm.ListedOffset
	ends.Each(func(o kadm.ListedOffset) { listed = append(listed, o) })
	for _, o := range listed {
		from := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil {
			from = c.At
		}
		if from >= o.Offset {
			continue
		}
		if o.Topic == d.cfg.Demo.Topic || o.Topic == d.cfg.Demo.PaymentsTopic || o.Topic == d.cfg.Demo.CustomersTopic || o.Topic == d.cfg.Demo.LimitsTopic {
			return false, nil
		}
		pending := 0
		err := offsets.ReadPartition(ctx, d.cl, o.Topic, o.Partition, from, func(rs []*kgo.Record, _ offsets.Progress) error {
			pending += len(rs)
			return nil
		})
		if err != nil || pending > 0 {
			return false, err
		}
	}
	return len(listed) > 0, nil
}

// report reads every sink topic and the dead-letter topic back with
// read_committed and prints what a user should see. stopped says the run
// was stopped before the pipeline had committed every record the feeder
// wrote: then fewer committed than written is expected.
func (d *demoRun) report(ctx context.Context, w io.Writer, cfg *config.Config, topics []string, st engine.Stats, cps *checkpointLog, elapsed time.Duration, stopped bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	counts, samples, err := readBack(ctx, d.cl, topics, 3)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s: read back with read_committed:\n", cfg.Name)
	sort.Strings(topics)
	for _, t := range topics {
		fmt.Fprintf(w, "  %-20s %7d records\n", t, counts[t])
		for _, s := range samples[t] {
			fmt.Fprintf(w, "      %s\n", s)
		}
	}
	p50, p99, max := cps.percentiles()
	in := st.RecordsIn
	rate := float64(in) / elapsed.Seconds()
	fmt.Fprintf(w, "\nsummary: %d records in, %d out (%d dead letters)", in, st.RecordsOut, st.DeadLetters)
	if st.Repartitioned > 0 {
		fmt.Fprintf(w, ", %d through repartition topics", st.Repartitioned)
	}
	fmt.Fprintf(w, ", %d checkpoints committed, %d aborted, %.0f records/s over %s\n",
		st.Committed, st.Aborted, rate, elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "commit phase of checkpoints: p50 %s, p99 %s, max %s\n", p50.Round(time.Millisecond), p99.Round(time.Millisecond), max.Round(time.Millisecond))
	if stopped {
		fmt.Fprintf(w, "stopped before the demo finished: %d of %d records written, %d committed\n", d.sent, cfg.Demo.Records, in)
		return nil
	}
	if in != int64(d.sent) {
		return fmt.Errorf("demo: %d records written but the pipeline committed %d of them", d.sent, in)
	}
	return nil
}

// readBack reads topics from the start to their read_committed end and
// returns the count per topic and a few sample values.
func readBack(ctx context.Context, cl *kgo.Client, topics []string, nSamples int) (map[string]int, map[string][]string, error) {
	counts := map[string]int{}
	samples := map[string][]string{}
	for _, t := range topics {
		recs, err := offsets.ReadToEnd(ctx, cl, t, true)
		if err != nil {
			return nil, nil, err
		}
		counts[t] = len(recs)
		for _, r := range recs[:min(nSamples, len(recs))] {
			s := fmt.Sprintf("key=%s value=%s", r.Key, r.Value)
			for _, h := range r.Headers {
				if h.Key == wire.HeaderError {
					s += " error=" + string(h.Value)
				}
			}
			samples[t] = append(samples[t], s)
		}
	}
	return counts, samples, nil
}
