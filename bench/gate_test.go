package bench

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func values(seqs ...int64) [][]byte {
	out := make([][]byte, len(seqs))
	for i, s := range seqs {
		out[i] = Value(nil, s, 0, 60)
	}
	return out
}

// counts returns keyed-count outputs: seq to the count it carries.
func counts(m map[int64]int64) [][]byte {
	var out [][]byte
	for seq, n := range m {
		out = append(out, fmt.Appendf(nil, `{"count":%d,"seq":%d,"ts":0}`, n, seq))
	}
	return out
}

func TestCheck(t *testing.T) {
	all := func(n int64) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(i)
		}
		return s
	}
	var kept []int64
	for s := range int64(20) {
		if filterKeeps(s) {
			kept = append(kept, s)
		}
	}
	tests := []struct {
		name   string
		values [][]byte
		expect Expect
		want   *GateError // nil: passes
	}{
		{"every record once passes", values(all(10)...), Expect{N: 10}, nil},
		{"order does not matter", values(9, 8, 7, 6, 5, 4, 3, 2, 1, 0), Expect{N: 10}, nil},
		{"the filtered subset passes", values(kept...), Expect{N: 20, Keep: filterKeeps}, nil},
		{"a missing record fails", values(0, 1, 2, 4), Expect{N: 5},
			&GateError{Want: 5, Got: 4, Missing: 1}},
		{"a duplicate fails even when the count matches", values(0, 1, 1, 3), Expect{N: 4},
			&GateError{Want: 4, Got: 4, Missing: 1, Duplicates: 1}},
		{"a record the filter drops fails", values(append(kept, 3)...), Expect{N: 20, Keep: filterKeeps},
			&GateError{Want: 18, Got: 19, Unexpected: 1}},
		{"a seq beyond the input fails", values(0, 1, 2), Expect{N: 2},
			&GateError{Want: 2, Got: 3, Unexpected: 1}},
		{"a value without a seq fails", append(values(0), []byte(`{"x":1}`)), Expect{N: 1},
			&GateError{Want: 1, Got: 2, Unreadable: 1}},
		{"nothing at all fails", nil, Expect{N: 3}, &GateError{Want: 3, Missing: 3}},
		{"keyed counts that are right pass", counts(map[int64]int64{0: 1, numKeys: 2, 1: 1}), Expect{N: numKeys + 1, Keep: func(s int64) bool { return s <= 1 || s == numKeys }, Valid: countIsRight}, nil},
		{"a keyed count off by one fails", counts(map[int64]int64{0: 1, numKeys: 3, 1: 1}), Expect{N: numKeys + 1, Keep: func(s int64) bool { return s <= 1 || s == numKeys }, Valid: countIsRight},
			&GateError{Want: 3, Got: 3, Wrong: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.values, tc.expect)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check = %v, want it to pass", err)
				}
				return
			}
			var ge *GateError
			if !errors.As(err, &ge) {
				t.Fatalf("Check = %v, want a *GateError", err)
			}
			if *ge != *tc.want {
				t.Errorf("Check = %+v, want %+v", *ge, *tc.want)
			}
		})
	}
}

func TestGateErrorSaysWhatWasWrong(t *testing.T) {
	err := &GateError{Want: 10, Got: 11, Missing: 1, Duplicates: 2}
	got := err.Error()
	for _, want := range []string{"read 11 of 10", "1 missing", "2 duplicated"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "unexpected") {
		t.Errorf("%q names a zero count", got)
	}
}

// TestCheckFinalCounts checks the gate of counts that emit some updates of
// a key: keys k0 and k1, seqs 0, 1, numKeys, numKeys+1 and 2*numKeys
// (three records of k0, two of k1).
func TestCheckFinalCounts(t *testing.T) {
	last := map[string]int64{"k0": 2 * numKeys, "k1": numKeys + 1}
	out := func(seqCounts ...int64) []*kgo.Record {
		var rs []*kgo.Record
		for i := 0; i < len(seqCounts); i += 2 {
			seq, n := seqCounts[i], seqCounts[i+1]
			rs = append(rs, &kgo.Record{Key: Key(nil, seq), Value: fmt.Appendf(nil, `{"count":%d,"seq":%d,"ts":0}`, n, seq)})
		}
		return rs
	}
	tests := []struct {
		name string
		outs []*kgo.Record
		want *GateError
	}{
		{"each key's last record, counted right, passes", out(2*numKeys, 3, numKeys+1, 2), nil},
		{"earlier updates as well pass", out(0, 1, numKeys, 2, 1, 1, 2*numKeys, 3, numKeys+1, 2), nil},
		{"a key whose last record has no output fails", out(numKeys, 2, numKeys+1, 2),
			&GateError{Want: 2, Got: 2, Missing: 1}},
		{"a count off by one fails", out(2*numKeys, 4, numKeys+1, 2),
			&GateError{Want: 2, Got: 2, Wrong: 1}},
		{"an update twice fails", out(2*numKeys, 3, numKeys+1, 2, numKeys+1, 2),
			&GateError{Want: 2, Got: 3, Duplicates: 1}},
		{"a key with no input fails", out(2*numKeys, 3, numKeys+1, 2, 5, 1),
			&GateError{Want: 2, Got: 3, Unexpected: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFinalCounts(last, tc.outs)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckFinalCounts = %v, want it to pass", err)
				}
				return
			}
			var ge *GateError
			if !errors.As(err, &ge) {
				t.Fatalf("CheckFinalCounts = %v, want a *GateError", err)
			}
			ge.Example = ""
			if *ge != *tc.want {
				t.Errorf("CheckFinalCounts = %+v, want %+v", *ge, *tc.want)
			}
		})
	}
}
