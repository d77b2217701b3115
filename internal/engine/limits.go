package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pipeline-run/pipeline/offsets"
)

// limits is the largest batch each topic the pipeline writes accepts: the
// smaller of producer.batch_max_bytes and the topic's max.message.bytes
// (which defaults to the brokers' message.max.bytes). A batch over a
// topic's limit is refused whole (MESSAGE_TOO_LARGE), the records that would
// have fitted with it; its checkpoint aborts, and so does every replay. So
// the producer sizes its batches per topic by these limits, and a record
// that could not fit in a batch of its own is refused before it is produced,
// where it can still go to the dead-letter topic.
type limits struct {
	batchMax int32            // producer.batch_max_bytes
	topics   map[string]int32 // max.message.bytes by topic, as the brokers report it
}

// batchHeader is what a record batch adds to its records: a record fits a
// topic's limit only with it.
const batchHeader = 61

// batch is the largest batch the producer builds for topic.
func (l *limits) batch(topic string) int32 {
	if m, ok := l.topics[topic]; ok && m < l.batchMax {
		return max(m, minBatch)
	}
	return l.batchMax
}

// minBatch is the smallest batch limit the client takes.
const minBatch = 512

// record returns the largest record (as outputSize measures it) topic takes,
// and which setting sets it, for messages; 0 if there is no limit.
func (l *limits) record(topic string) (int, string) {
	if l == nil || l.batchMax <= 0 {
		return 0, ""
	}
	if m, ok := l.topics[topic]; ok && m < l.batchMax {
		return int(m) - batchHeader, fmt.Sprintf("the max.message.bytes (%d) of topic %s", m, topic)
	}
	return int(l.batchMax) - batchHeader, fmt.Sprintf("producer.batch_max_bytes (%d)", l.batchMax)
}

// topicLimits reads max.message.bytes of the topics the pipeline writes.
func topicLimits(ctx context.Context, adm *kadm.Client, acc access, batchMax int32, topics []string) (*limits, error) {
	l := &limits{batchMax: batchMax, topics: map[string]int32{}}
	if len(topics) == 0 {
		return l, nil
	}
	// A topic created a moment ago may not be known yet to the broker
	// that answers: that passes, so retriable errors are asked again
	// (ctx bounds it).
	var rcs kadm.ResourceConfigs
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		var err error
		rcs, err = adm.DescribeTopicConfigs(ctx, topics...)
		if err == nil {
			for _, rc := range rcs {
				if rc.Err != nil {
					err = fmt.Errorf("topic %q: %w", rc.Name, acc.deniedTopic(rc.Err, rc.Name, false))
					break
				}
			}
		}
		if err == nil {
			break
		}
		if !offsets.Transient(err) {
			return nil, fmt.Errorf("reading max.message.bytes of the output topics: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading max.message.bytes of the output topics: %w", errors.Join(err, ctx.Err()))
		case <-time.After(pause):
		}
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*c.Value, 10, 32)
			if err != nil || n <= batchHeader {
				return nil, fmt.Errorf("topic %q has max.message.bytes %q, not a usable size", rc.Name, *c.Value)
			}
			l.topics[rc.Name] = int32(n)
		}
	}
	return l, nil
}
