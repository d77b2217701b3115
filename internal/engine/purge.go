package engine

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pipeline-run/pipeline/offsets"
)

// purgeEvery is how often the records of repartition topics that committed
// checkpoints consumed are deleted.
const purgeEvery = 30 * time.Second

// purger deletes what the pipeline consumed of its repartition topics, as
// Kafka Streams does: those topics keep records of any timestamp
// (retention.ms=-1, so that records stamped with an old event time are not
// deleted before they are read), and are trimmed here instead, up to the
// offsets committed checkpoints consumed. Deleting below a committed
// offset cannot lose anything: no replay goes back that far.
type purger struct {
	rt      *runtime
	adm     *kadm.Client
	topics  map[string]bool
	every   time.Duration
	upTo    kadm.Offsets // per partition, the offset after the last committed one
	last    time.Time
	wg      sync.WaitGroup
	running atomic.Bool  // a deletion is under way
	done    atomic.Int64 // deletions that succeeded
	lines   rateLog
}

func newPurger(rt *runtime) *purger {
	p := &purger{rt: rt, topics: map[string]bool{}, upTo: kadm.Offsets{}, last: time.Now(), lines: rateLog{every: time.Minute}, every: purgeEvery}
	if rt.p.purgeEvery > 0 {
		p.every = rt.p.purgeEvery
	}
	for _, n := range rt.g.nodes {
		if n.repart != nil {
			p.topics[n.repart.topic] = true
		}
	}
	if len(p.topics) > 0 && rt.restoreCl != nil {
		p.adm = kadm.NewClient(rt.restoreCl)
	}
	return p
}

// committed notes a committed checkpoint's ranges and, every purgeEvery,
// deletes up to them in the background.
func (p *purger) committed(ranges []offsets.Range) {
	if p.adm == nil {
		return
	}
	for _, r := range ranges {
		if p.topics[r.Topic] {
			p.upTo.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Next(), LeaderEpoch: -1})
		}
	}
	if p.running.Load() || len(p.upTo) == 0 || time.Since(p.last) < p.every {
		return
	}
	upTo := p.upTo
	p.upTo, p.last = kadm.Offsets{}, time.Now()
	p.running.Store(true)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.running.Store(false)
		ctx, cancel := context.WithTimeout(p.rt.hard, 30*time.Second)
		defer cancel()
		resp, err := p.adm.DeleteRecords(ctx, upTo)
		if err == nil {
			err = resp.Error()
		}
		if err != nil && isAccessDenied(err) {
			acc := access{cfg: p.rt.cfg, g: p.rt.g}
			err = acc.deniedTopic(err, slices.Min(slices.Collect(maps.Keys(upTo))), false)
		}
		if err != nil {
			// The next round deletes further; nothing depends on it.
			p.lines.log(p.rt.log, slog.LevelWarn, "deleting consumed records of repartition topics", "err", err)
			return
		}
		p.done.Add(1)
	}()
}

// wait waits for a deletion under way.
func (p *purger) wait() { p.wg.Wait() }
