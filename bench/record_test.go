package bench

import (
	"encoding/json"
	"testing"
)

func TestValueIsPaddedToTheRecordSize(t *testing.T) {
	for _, size := range []int{60, 100, 1024} {
		v := Value(nil, 199999, 1732890000123456, size)
		if len(v) != size {
			t.Errorf("size %d: value is %d bytes: %s", size, len(v), v)
		}
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			t.Errorf("size %d: not JSON: %v", size, err)
		}
	}
	if v := Value(nil, 1, 2, 10); len(v) <= 10 || !json.Valid(v) {
		t.Errorf("a size too small for the fields should give the shortest valid value, got %s", v)
	}
}

func TestSeqAndSentAtAreReadFromInputsAndReencodedOutputs(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		seq, ts int64
		ok      bool
	}{
		{"an input value", string(Value(nil, 42, 1700000000000001, 100)), 42, 1700000000000001, true},
		{"the map's output, keys sorted", `{"pad":"xxxx","seq":7,"ts":99,"twice":14}`, 7, 99, true},
		{"spaces after the colon", `{"seq": 5, "ts": 6}`, 5, 6, true},
		{"seq zero", `{"seq":0,"ts":1}`, 0, 1, true},
		{"no seq", `{"pad":"x"}`, 0, 0, false},
		{"a seq that is not a number", `{"seq":"a","ts":1}`, 0, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq, ok := Seq([]byte(tc.value))
			if ok != tc.ok || (ok && seq != tc.seq) {
				t.Errorf("Seq(%s) = %d, %v; want %d, %v", tc.value, seq, ok, tc.seq, tc.ok)
			}
			if ts, ok := SentAt([]byte(tc.value)); ok && ts != tc.ts {
				t.Errorf("SentAt(%s) = %d, want %d", tc.value, ts, tc.ts)
			}
		})
	}
}

func TestKeysRepeatEveryNumKeysRecords(t *testing.T) {
	if a, b := string(Key(nil, 3)), string(Key(nil, 3+numKeys)); a != b || a != "k3" {
		t.Errorf("Key(3) = %s, Key(3+%d) = %s", a, numKeys, b)
	}
}

func TestExpectCountsTheFilteredSubset(t *testing.T) {
	if got := (Expect{N: 100}).Count(); got != 100 {
		t.Errorf("without a filter: %d, want 100", got)
	}
	if got := (Expect{N: 100, Keep: filterKeeps}).Count(); got != 90 {
		t.Errorf("filter-map keeps %d of 100, want 90", got)
	}
}
