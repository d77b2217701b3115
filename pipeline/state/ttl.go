package state

import (
	"fmt"
	"time"
)

// TTLConfig gives a state's values a time to live. The zero value keeps
// them until they are deleted.
type TTLConfig struct {
	// TTL is how long a value lives after its last refresh; 0 for ever.
	TTL time.Duration
	// Update says what refreshes the expiry.
	Update TTLUpdate
}

// TTLUpdate says which accesses refresh a value's expiry.
type TTLUpdate uint8

const (
	// OnCreateAndWrite refreshes the expiry when the value is written.
	OnCreateAndWrite TTLUpdate = iota
	// OnReadAndWrite refreshes it on reads too. A read that refreshes is a
	// write: the value goes to the changelog with its new expiry, so a
	// restored store expires it at the same time.
	OnReadAndWrite
)

func (u TTLUpdate) String() string {
	switch u {
	case OnCreateAndWrite:
		return "on_create_and_write"
	case OnReadAndWrite:
		return "on_read_and_write"
	}
	return fmt.Sprintf("TTLUpdate(%d)", uint8(u))
}

func (c TTLConfig) validate() error {
	if c.TTL < 0 {
		return fmt.Errorf("negative TTL %v", c.TTL)
	}
	if c.Update > OnReadAndWrite {
		return fmt.Errorf("unknown TTL update policy %v", c.Update)
	}
	return nil
}

// Clock tells the time TTLs are measured with: processing time. Tests inject
// a fake one.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
