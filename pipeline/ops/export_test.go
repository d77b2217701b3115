package ops

import "github.com/pipeline-run/pipeline/pipeline"

// SetJoinCacheSize bounds the keys a join operator caches, so that a test
// can make it write its cache back and empty it.
func SetJoinCacheSize(op pipeline.Operator, n int) {
	switch o := op.(type) {
	case *tableJoinOp:
		o.cache.max = n
	case *intervalJoinOp:
		o.cache.max = n
	default:
		panic("not a join operator")
	}
}
