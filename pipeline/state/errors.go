package state

import (
	"errors"
	"fmt"
)

// ErrIncompatible says the persisted state was written by a different
// operator definition (its fingerprint differs). The runtime must refuse to
// start the task: the old state would be misread. Reset deletes it
// deliberately. Errors wrapping it are *IncompatibleError.
var ErrIncompatible = errors.New("state incompatible with the operator definition")

// ErrSealed is returned by a write between Changes and the Commit or Abort
// that ends the checkpoint: the changes have been handed out to be produced,
// and a later write would be committed locally without being in the
// changelog. Reads that refresh a TTL (OnReadAndWrite) are writes too.
var ErrSealed = errors.New("state changes collected for a checkpoint: write after Commit or Abort")

// ErrInUse is returned by Open and Reset for a store (name and task) that is
// open already on the same backend.
var ErrInUse = errors.New("state store already open")

// ErrClosed is returned by the methods of a closed Store or Backend.
var ErrClosed = errors.New("state store closed")

// IncompatibleError is a fingerprint mismatch: the state of Store for Task
// was written by an operator whose fingerprint is Have, the running one has
// Want. Offset is the changelog offset of the fingerprint record when the
// mismatch was found on Restore, -1 when it was found in the local backend
// on Open; Applied is then the local state's applied offset, which tells
// the caller whether the changelog still holds that state (see Reset).
type IncompatibleError struct {
	Store   string
	Task    int32
	Have    string
	Want    string
	Offset  int64
	Applied int64
}

func (e *IncompatibleError) Error() string {
	where := "local state"
	if e.Offset >= 0 {
		where = fmt.Sprintf("changelog offset %d", e.Offset)
	}
	return fmt.Sprintf("state store %q task %d: %s has operator fingerprint %q, the operator now has %q: %v",
		e.Store, e.Task, where, e.Have, e.Want, ErrIncompatible)
}

func (e *IncompatibleError) Unwrap() error { return ErrIncompatible }

// CorruptError is a changelog record that cannot be decoded. Restore applies
// nothing of the batch holding it: the record is never skipped silently.
type CorruptError struct {
	Store  string
	Task   int32
	Offset int64 // the record's offset in the changelog partition
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("state store %q task %d: corrupt changelog record at offset %d: %v", e.Store, e.Task, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }
