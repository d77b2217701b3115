// Package state keeps the keyed state of stateful operators, per task, as a
// cache of a changelog.
//
// A Store is one operator's state in one task. It holds named state kinds,
// each keyed by the record key, each with an optional TTL: Value, List, Map,
// Reducing and Aggregating, typed by Go generics and encoded by a Codec
// (JSON unless WithCodec says otherwise). Writes go to an uncommitted overlay
// in memory; the committed state lives in a Backend (Memory, or Pebble on
// disk) together with the changelog offset it has applied, written
// atomically with it.
//
// # The checkpoint protocol
//
// The durable truth is the store's changelog partition (compacted, one
// partition per task); the backend is a cache of it. Per store, the
// checkpoint coordinator:
//
//	// At the barrier, once the task is idle:
//	s.Expire(now, limit)           // TTL removals become changes too
//	recs := s.Changes()            // sorted; the store is sealed until Commit or Abort
//	// produce recs to the changelog partition inside the transaction,
//	// remembering the offset of the last one
//	// after the transaction committed:
//	s.Commit(lastOffset)           // -1 if recs was empty
//	// if it aborted (or any failure before the commit was acknowledged):
//	s.Abort()                      // back to the last committed state
//
// To start a task (or after an ambiguous commit, once aborted):
//
//	s, err := state.Open(backend, name, task, fingerprint, nil)
//	// register the operator's states (NewValue and the like), so that
//	// Restore checks each record against its state's codec; then read
//	// the changelog partition with read_committed from
//	// s.AppliedOffset()+1 to its end, and per fetched batch:
//	s.Restore(recs, lastOffsetRead)
//
// A crash between the Kafka commit and Commit leaves the backend one
// checkpoint behind, with the matching applied offset: the restore reads
// that checkpoint's records back. Records hold full values, never deltas, and
// Restore skips those at or before the applied offset, so replaying records
// already applied is harmless.
//
// A tail restore is only sound while the changelog still holds every record
// after AppliedOffset, tombstones included. If the partition's log start
// offset is past AppliedOffset()+1, or its end is before it (the topic was
// deleted and created again), or the store was last applied longer ago
// than the topic's delete.retention.ms (compaction may have dropped
// tombstones), the runtime must Reset the store and restore it from the
// start of the partition.
//
// A store's fingerprint (computed by the runtime from the operator's
// definition) is kept in the backend and travels in the changelog as a
// metadata record; opening or restoring state written under another
// fingerprint fails with an *IncompatibleError. Reset deletes a store's
// local state deliberately.
//
// # TTL
//
// An expired value is never returned, whether or not it was removed yet.
// Removal is driven by an expiry index (a heap in memory, an index key range
// in pebble): Expire visits the earliest expiries only, so its cost follows
// what expires, never the size of the store.
//
// # Concurrency
//
// A Store is used by one goroutine at a time: its task's, or the
// coordinator's while the task waits at a barrier. A Backend is shared by
// the stores of a process. Values returned by reads belong to the caller.
package state
