package bench

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/config"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Broker != "embedded" || o.Records != 200000 || o.Rounds != 5 || !o.Latency || !o.Warmup {
		t.Errorf("defaults: %+v", o)
	}
	if !slices.Equal(o.Sizes, []int{100, 1024}) || !slices.Equal(o.Partitions, []int{1, 6}) {
		t.Errorf("sizes %v, partitions %v", o.Sizes, o.Partitions)
	}
	if !slices.Equal(o.Intervals, []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second}) {
		t.Errorf("intervals %v", o.Intervals)
	}
	if !slices.Equal(o.Arms, ArmNames) {
		t.Errorf("arms %v, want all", o.Arms)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(Options) bool
		usage bool
	}{
		{"arms are reported in the fixed order", []string{"-arms", "pass,copy,pass"},
			func(o Options) bool { return slices.Equal(o.Arms, []string{"copy", "pass"}) }, false},
		{"intervals are sorted and deduplicated", []string{"-intervals", "5s,100ms,5s"},
			func(o Options) bool {
				return slices.Equal(o.Intervals, []time.Duration{100 * time.Millisecond, 5 * time.Second})
			}, false},
		{"a broker address", []string{"-broker", "127.0.0.1:19092", "-rounds", "3"},
			func(o Options) bool { return o.Broker == "127.0.0.1:19092" && o.Rounds == 3 }, false},
		{"a report needs no broker", []string{"-report", "a.json,b.json", "-plot", "x.png"},
			func(o Options) bool { return slices.Equal(o.Report, []string{"a.json", "b.json"}) }, false},
		{"an unknown arm", []string{"-arms", "copy,nope"}, nil, true},
		{"a size too small for the value", []string{"-size", "20"}, nil, true},
		{"a size that is no number", []string{"-size", "1k"}, nil, true},
		{"an interval that is no duration", []string{"-intervals", "1"}, nil, true},
		{"zero rounds", []string{"-rounds", "0"}, nil, true},
		{"a log level", []string{"-log-level", "debug"},
			func(o Options) bool { return o.LogLevel == slog.LevelDebug }, false},
		{"an unknown log level", []string{"-log-level", "loud"}, nil, true},
		{"an unknown flag", []string{"-frob"}, nil, true},
		{"an argument", []string{"extra"}, nil, true},
		{"a linger", []string{"-linger", "0s"}, func(o Options) bool { return o.Linger == 0 }, false},
		{"a negative linger", []string{"-linger", "-1ms"}, nil, true},
		{"a latency rate", []string{"-latency-rate", "50000"}, func(o Options) bool { return o.LatencyRate == 50000 }, false},
		{"a negative latency rate", []string{"-latency-rate", "-1"}, nil, true},
		{"a latency rate that is no number", []string{"-latency-rate", "NaN"}, nil, true},
		{"the default settle period", nil, func(o Options) bool { return o.LatencySettle == 2*time.Second }, false},
		{"a settle period", []string{"-latency-settle", "500ms"}, func(o Options) bool { return o.LatencySettle == 500*time.Millisecond }, false},
		{"no settle period", []string{"-latency-settle", "0s"}, func(o Options) bool { return o.LatencySettle == 0 }, false},
		{"a negative settle period", []string{"-latency-settle", "-1s"}, nil, true},
		{"an unknown arm to profile", []string{"-cpuprofile", "x", "-profile-arm", "nope"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseFlags(tc.args, io.Discard)
			if tc.usage {
				if !errors.Is(err, ErrUsage) {
					t.Errorf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(o) {
				t.Errorf("options: %+v", o)
			}
		})
	}
	if _, err := ParseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

// TestDefaultLingerIsThePipelines: the arms are compared at the pipeline's
// own producer settings unless told otherwise.
func TestDefaultLingerIsThePipelines(t *testing.T) {
	o, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("name: p\nbrokers: [localhost:9092]\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\n"), "p.yaml",
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if o.Linger != cfg.Producer.Linger {
		t.Fatalf("-linger defaults to %v, the pipeline's producer.linger to %v", o.Linger, cfg.Producer.Linger)
	}
}
