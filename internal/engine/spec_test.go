package engine

import (
	"strings"
	"testing"
)

// TestSpecDurationsAreReadLikeSettings checks that a duration inside an
// operator's spec is read as a top-level setting's is: a bare number, a
// negative value or garbage is an error at the key's YAML path and line,
// saying what a valid value looks like, and nothing else is reported.
func TestSpecDurationsAreReadLikeSettings(t *testing.T) {
	tests := []struct{ name, step, want string }{
		{"a bare number in dedupe is not nanoseconds", `{dedupe: {ttl: 5}}`,
			`steps[0].dedupe.ttl (line 5): a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h)`},
		{"a bare number in aggregate is not nanoseconds", `{aggregate: {fields: {n: count}, ttl: 5}}`,
			`steps[0].aggregate.ttl (line 5): a duration needs a unit: found 5; write "5s", "5ms" or "5m" (units: ns, us, ms, s, m, h)`},
		{"garbage says what a duration looks like", `{dedupe: {ttl: "abc"}}`,
			`steps[0].dedupe.ttl (line 5): expected a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h), found "abc"`},
		{"a negative ttl is negative, not missing", `{dedupe: {ttl: -1m}}`,
			`steps[0].dedupe.ttl (line 5): must not be negative, found -1m`},
		{"a negative aggregate ttl", `{aggregate: {fields: {n: count}, ttl: -1h}}`,
			`steps[0].aggregate.ttl (line 5): must not be negative, found -1h`},
		{"a wrong type elsewhere in a spec names its key", `{dedupe: {ttl: 1m, id: [a]}}`,
			`steps[0].dedupe.id (line 5): expected a string, found a list`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parseConfig(t, "sources: {in: {topics: [in]}}\nsteps:\n  - "+tc.step+"\nsinks: {out: {topic: out}}\n")
			_, err := Build(cfg, nil)
			if err == nil {
				t.Fatal("Build succeeded")
			}
			if got := strings.TrimSpace(err.Error()); got != tc.want {
				t.Fatalf("error:\n%s\nwant exactly:\n%s", got, tc.want)
			}
		})
	}
	for _, ok := range []string{`{dedupe: {ttl: 10m}}`, `{aggregate: {fields: {n: count}, ttl: 0}}`, `{aggregate: {fields: {n: count}, ttl: 1h30m}}`} {
		cfg := parseConfig(t, "sources: {in: {topics: [in]}}\nsteps:\n  - "+ok+"\nsinks: {out: {topic: out}}\n")
		if _, err := Build(cfg, nil); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
