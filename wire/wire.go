// Package wire holds what the pipeline writes to Kafka for others to read:
// the progress records of the audit topic, the headers it sets on dead
// letters, sink records and repartition records, and the names of its
// internal topics. `pipeline audit` and other tools read these without
// linking the engine.
package wire

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// CheckpointID numbers the checkpoints of one run.
type CheckpointID uint64

// Headers set on dead-letter records.
const (
	HeaderError     = "pipeline.error"
	HeaderStep      = "pipeline.step"
	HeaderTopic     = "pipeline.source.topic"
	HeaderPartition = "pipeline.source.partition"
	HeaderOffset    = "pipeline.source.offset"
	// HeaderTruncated is set, to the original length, on a dead letter
	// whose value was cut to fit the dead-letter topic's limit.
	HeaderTruncated = "pipeline.truncated"
)

// Headers set on sink records with audit.source_positions.
const (
	// HeaderSource is where the input record a sink record derives from
	// was read: "topic/partition@offset".
	HeaderSource = "pipeline.source"
	// HeaderOutput says which of that input's outputs the record is:
	// "<sink>/<n>", n counting from 0 the records the sink wrote for it.
	HeaderOutput = "pipeline.output"
)

// HeaderValueFormat, on a repartition record, says how its value is
// encoded: unchanged values keep their source's format, changed ones are
// JSON.
const HeaderValueFormat = "pipeline.value-format"

// HeaderWatermark marks a watermark record of a repartition topic: no key,
// no value, this one header, whose value is the writing task and its
// watermark (FormatWatermark). Readers take the minimum over the writers
// and never hand these records to operators.
const HeaderWatermark = "pipeline.watermark"

// FormatWatermark is the header value saying that task writer's watermark
// is wm (Unix milliseconds; math.MinInt64 for none yet), and whether every
// input of the writer is idle: "<writer> <wm>", "<writer> idle <wm>" or
// "<writer> idle".
func FormatWatermark(writer int32, wm int64, idle bool) []byte {
	switch {
	case idle && wm == math.MinInt64:
		return fmt.Appendf(nil, "%d idle", writer)
	case idle:
		return fmt.Appendf(nil, "%d idle %d", writer, wm)
	}
	return fmt.Appendf(nil, "%d %d", writer, wm)
}

// ParseWatermark reads a FormatWatermark value.
func ParseWatermark(b []byte) (writer int32, wm int64, idle bool, err error) {
	f := strings.Fields(string(b))
	bad := func(what string) (int32, int64, bool, error) {
		return 0, 0, false, fmt.Errorf("watermark %q: %s (want \"<writer> <millis>\", \"<writer> idle <millis>\" or \"<writer> idle\")", b, what)
	}
	if len(f) < 2 || len(f) > 3 {
		return bad("malformed")
	}
	n, err := strconv.ParseInt(f[0], 10, 32)
	if err != nil || n < 0 {
		return bad("bad writer")
	}
	wm = math.MinInt64
	if idle = f[1] == "idle"; idle {
		f = f[1:]
	} else if len(f) != 2 {
		return bad("malformed")
	}
	if len(f) == 2 {
		if wm, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return bad("bad time")
		}
	}
	return int32(n), wm, idle, nil
}

// ChangelogTopic is the changelog topic of a stateful step.
func ChangelogTopic(pipelineName, step string) string {
	return pipelineName + "-" + step + "-changelog"
}

// RepartitionTopic is the internal topic of a key_by step.
func RepartitionTopic(pipelineName, step string) string {
	return pipelineName + "-" + step + "-repartition"
}
