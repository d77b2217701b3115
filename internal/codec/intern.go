package codec

import (
	"strings"
	"sync"
)

// interned holds one copy of each field name a configuration mentions.
var interned struct {
	sync.Mutex
	m map[string]string
}

// Intern returns the one copy of s kept for every caller: the names of a
// projection's fields (which decoding gives the fields it keeps) and the
// field names expressions read are interned, so that finding a field by
// its name is a comparison of pointers (Value.fieldAt) rather than of
// bytes. Call it when compiling configurations, not per record: what it
// keeps is never freed.
func Intern(s string) string {
	interned.Lock()
	defer interned.Unlock()
	if c, ok := interned.m[s]; ok {
		return c
	}
	if interned.m == nil {
		interned.m = map[string]string{}
	}
	s = strings.Clone(s) // not part of a larger string kept alive
	interned.m[s] = s
	return s
}
