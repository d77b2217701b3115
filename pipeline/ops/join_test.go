package ops_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pipeline-run/pipeline/pipeline"
	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/pipeline/optest"
)

// TestJoinsOutgrowTheirCache: with room for two keys in their caches, the
// joins write the cache back and empty it again and again between two
// checkpoints, and every key read back from the store must join as it would have:
// each of 6 keys has a right record (a table row) at time 10 and then a
// left record (the stream) at time 20, and the timers fire after a
// checkpoint.
func TestJoinsOutgrowTheirCache(t *testing.T) {
	for _, tc := range []struct {
		kind string
		args map[string]any
	}{
		{"table_join", map[string]any{}},
		{"interval_join", map[string]any{"lower": "-10ms", "upper": "0s"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			open := statefulOpenerN(t, "j", tc.kind, tc.args, 2)
			st, op := open()
			ops.SetJoinCacheSize(op, 2)
			ctx := optest.NewContext(t)
			feed := func(input int, key string, ts int64, v string) {
				t.Helper()
				r := jsonRecord(v)
				r.Key = pipeline.RawValue([]byte(key), pipeline.String)
				r.Timestamp = time.UnixMilli(ts)
				r.Source = pipeline.Position{Topic: "in", Partition: int32(input), Offset: ts}
				ctx.In = input
				if err := op.Process(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			checkpoint := func() {
				t.Helper()
				if err := op.(pipeline.Flusher).Flush(ctx); err != nil {
					t.Fatal(err)
				}
				st.Changes()
				if err := st.Commit(-1); err != nil {
					t.Fatal(err)
				}
			}
			const keys = 6
			for i := range keys {
				feed(1, fmt.Sprintf("k%d", i), 10, fmt.Sprintf(`{"row":%d}`, i))
			}
			for i := range keys {
				feed(0, fmt.Sprintf("k%d", i), 20, fmt.Sprintf(`{"rec":%d}`, i))
			}
			checkpoint()
			fireTimers(t, ctx, st, op, 1000)
			var got, want []string
			for _, r := range ctx.Emitted("") {
				b, _ := r.Value.Encode(pipeline.JSON)
				got = append(got, string(b))
			}
			for i := range keys {
				want = append(want, fmt.Sprintf(`{"key":"k%d","left":{"rec":%d},"right":{"row":%d}}`, i, i, i))
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("results:\n%q\nwant\n%q", got, want)
			}
		})
	}
}
