package pipeline

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkEvalMembers evaluates a predicate on decoded records with the
// member patch that reads value fields directly ("eval") and with the
// expression library's reflection ("eval-reflect").
func BenchmarkEvalMembers(b *testing.B) {
	const src = `value.seq % 10 != 3 && value.k != "k7"`
	rs := make([]*Record, 1000)
	for i := range rs {
		rs[i] = NewRecord(&kgo.Record{Topic: "in", Key: []byte("k"), Value: fmt.Appendf(nil, `{"k":"k%d","seq":%d,"p":"xx"}`, i%10, i)}, String, JSON)
	}
	for _, c := range []struct {
		name string
		fast bool
	}{{"eval", true}, {"eval-reflect", false}} {
		e, err := compileExpr(src, BoolResult, c.fast)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			var ev Evaluator
			for _, r := range rs {
				if _, err := ev.EvalBool(e, r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := ev.EvalBool(e, rs[i%len(rs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
