package config

import (
	"testing"
	"time"
)

func TestDurationsNeedAUnitAndAreNotNegative(t *testing.T) {
	tests := []struct {
		name string
		in   any // as a setting's text, or a value of an operator's spec
		want time.Duration
		err  string
	}{
		{"a duration with a unit", "1h30m", 90 * time.Minute, ""},
		{"milliseconds", "500ms", 500 * time.Millisecond, ""},
		{"zero alone", "0", 0, ""},
		{"the number zero", 0, 0, ""},
		{"a bare number as text", "5", 0, `a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h)`},
		{"a bare number", 5, 0, `a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h)`},
		{"a bare fraction", 1.5, 0, `a duration needs a unit: found 1.5; write "1.5s", "1.5ms" or "1.5m" (units: ns, us, ms, s, m, h)`},
		{"a negative duration", "-1m", 0, "must not be negative, found -1m"},
		{"garbage", "abc", 0, `expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found "abc"`},
		{"an unknown unit", "1d", 0, `expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found "1d"`},
		{"a boolean", true, 0, `expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found true`},
		{"a list", []any{"1s"}, 0, `expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found a list`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DurationOf(tc.in)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("DurationOf(%#v): %v", tc.in, err)
			case tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Fatalf("DurationOf(%#v) error = %v, want %q", tc.in, err, tc.err)
			case got != tc.want:
				t.Fatalf("DurationOf(%#v) = %v, want %v", tc.in, got, tc.want)
			}
			if s, ok := tc.in.(string); ok {
				got2, err2 := ParseDuration(s)
				if got2 != got || (err2 == nil) != (err == nil) || (err != nil && err2.Error() != err.Error()) {
					t.Errorf("ParseDuration(%q) = %v, %v; DurationOf gave %v, %v", s, got2, err2, got, err)
				}
			}
		})
	}
}
