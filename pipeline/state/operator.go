package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Operator state is state of a task rather than of a key (Flink's
// CheckpointedFunction list state): what an operator that is not keyed
// keeps, such as a buffer of records it has not written yet or the
// position it reached in an outside system. It rides the checkpoint like
// keyed state, and each task gets back its own list after a restart or a
// rebalance. When the number of tasks changes (partitions were added to
// the input), the runtime redistributes it, before any task runs:
//
//   - an OperatorList's elements, of every old task in task order, are split
//     into as many contiguous parts of (nearly) equal length as there are
//     new tasks;
//   - a union list's elements, of every old task in task order, all go to
//     every new task, which picks what it needs.
//
// Keyed state cannot be redistributed this way: a step that keeps any
// still refuses a changed task count.
const (
	kindOperatorList = "operator list"
	kindUnionList    = "union list"
)

// A changelog value of operator state is a list whose payload starts with
// the number of tasks the step ran when it was written (uvarint), so that a
// restore can tell state of the current layout from state waiting to be
// redistributed.

// OperatorList is a list of elements kept per task, not per key. See
// NewOperatorList and NewUnionList for how it moves when the number of
// tasks changes.
type OperatorList[T any] struct {
	s     *Store
	st    *stateInfo
	codec Codec[T]
}

// NewOperatorList registers operator state named name in s: one list per
// task, split among the new tasks when their number changes.
func NewOperatorList[T any](s *Store, name string, opts ...Option[T]) (*OperatorList[T], error) {
	return newOperatorList(s, name, kindOperatorList, opts)
}

// NewUnionList registers operator state named name in s: one list per
// task, and when the number of tasks changes every new task gets the
// elements of all the old ones.
func NewUnionList[T any](s *Store, name string, opts ...Option[T]) (*OperatorList[T], error) {
	return newOperatorList(s, name, kindUnionList, opts)
}

func newOperatorList[T any](s *Store, name, kind string, opts []Option[T]) (*OperatorList[T], error) {
	c := codecOf(opts)
	check := func(p []byte) error {
		_, elems, err := splitOperatorValue(p)
		if err != nil {
			return err
		}
		for _, e := range elems {
			if _, err := c.Decode(e); err != nil {
				return err
			}
		}
		return nil
	}
	st, err := s.register(name, kind, TTLConfig{}, check)
	if err != nil {
		return nil, err
	}
	return &OperatorList[T]{s: s, st: st, codec: c}, nil
}

// Get returns the task's list, nil if it is empty.
func (l *OperatorList[T]) Get() ([]T, error) {
	elems, err := l.s.operatorElems(l.st)
	if err != nil || len(elems) == 0 {
		return nil, err
	}
	out := make([]T, 0, len(elems))
	for _, e := range elems {
		x, err := l.codec.Decode(e)
		if err != nil {
			return nil, l.s.decodeErr(l.st, nil, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// Add appends x to the task's list.
func (l *OperatorList[T]) Add(x T) error {
	s := l.s
	if err := s.writable(); err != nil {
		return err
	}
	elems, err := s.operatorElems(l.st)
	if err != nil {
		return err
	}
	e, err := l.codec.Append(nil, x)
	if err != nil {
		return s.encodeErr(l.st, nil, err)
	}
	s.setOperatorElems(l.st, append(elems, e))
	return nil
}

// Update replaces the task's list with xs; an empty xs clears it.
func (l *OperatorList[T]) Update(xs []T) error {
	s := l.s
	if err := s.writable(); err != nil {
		return err
	}
	elems := make([][]byte, 0, len(xs))
	for _, x := range xs {
		e, err := l.codec.Append(nil, x)
		if err != nil {
			return s.encodeErr(l.st, nil, err)
		}
		elems = append(elems, e)
	}
	s.setOperatorElems(l.st, elems)
	return nil
}

// Clear empties the task's list.
func (l *OperatorList[T]) Clear() error {
	if err := l.s.writable(); err != nil {
		return err
	}
	l.s.setOperatorElems(l.st, nil)
	return nil
}

// SetTaskCount tells the store how many tasks its step runs: operator
// state is written with that number, and reading operator state written
// with another (state that was not redistributed) fails. The runtime sets
// it when it opens a task's store; 0 (the default) checks nothing.
func (s *Store) SetTaskCount(n int32) { s.taskCount = n }

// operatorElems returns the elements of operator state st, each a slice
// of the stored value (valid until the next write).
func (s *Store) operatorElems(st *stateInfo) ([][]byte, error) {
	val, _, _, err := s.lookup(s.key(st, nil))
	if err != nil || val == nil {
		return nil, err
	}
	tasks, elems, err := splitOperatorValue(payloadOf(val))
	if err != nil {
		return nil, s.decodeErr(st, nil, err)
	}
	if s.taskCount > 0 && tasks > 0 && tasks != s.taskCount {
		return nil, s.errorf("%s state %q was written when the step ran %d tasks, and it now runs %d: the state was not redistributed", st.kind, st.name, tasks, s.taskCount)
	}
	return elems, nil
}

// setOperatorElems writes operator state st; no elements delete it.
func (s *Store) setOperatorElems(st *stateInfo, elems [][]byte) {
	k := s.key(st, nil)
	if len(elems) == 0 {
		s.del(st, k, -1)
		return
	}
	buf := appendOperatorValue(s.header(st), s.taskCount, elems)
	s.set(st, k, buf, -1)
	s.wbuf = buf[:0]
}

func appendOperatorValue(dst []byte, tasks int32, elems [][]byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(tasks))
	for _, e := range elems {
		dst = appendElem(dst, e)
	}
	return dst
}

func splitOperatorValue(p []byte) (tasks int32, elems [][]byte, err error) {
	n, w := binary.Uvarint(p)
	if w <= 0 || n > 1<<31-1 {
		return 0, nil, errors.New("bad task count")
	}
	p = p[w:]
	for len(p) > 0 {
		var e []byte
		if e, p, err = lenPrefixed(p); err != nil {
			return 0, nil, fmt.Errorf("list element: %w", err)
		}
		elems = append(elems, e)
	}
	return int32(n), elems, nil
}

func isOperatorKind(kind string) bool { return kind == kindOperatorList || kind == kindUnionList }

// KeyedStates returns the names of the states registered in s that are
// not operator state (keyed states, timers), sorted: a step with any
// cannot have its state redistributed.
func KeyedStates(s *Store) []string {
	var out []string
	for name, st := range s.states {
		if !isOperatorKind(st.kind) {
			out = append(out, fmt.Sprintf("%s (%s)", name, st.kind))
		}
	}
	slices.Sort(out)
	return out
}

// OperatorLayouts returns the task counts the operator state in s was
// written with, sorted and without repeats (nothing if it holds none).
func OperatorLayouts(s *Store) ([]int32, error) {
	var out []int32
	for _, st := range s.states {
		if !isOperatorKind(st.kind) {
			continue
		}
		val, _, _, err := s.lookup(s.key(st, nil))
		if err != nil {
			return nil, err
		}
		if val == nil {
			continue
		}
		tasks, _, err := splitOperatorValue(payloadOf(val))
		if err != nil {
			return nil, s.decodeErr(st, nil, err)
		}
		out = append(out, tasks)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Redistribute gives the new stores, one per new task in task order, the
// operator state of the old ones, one per old task in task order (restored
// from their changelogs), as NewOperatorList and NewUnionList describe.
// Every store has the same states registered, all of them operator state.
// Each new store gets a value for every state, an empty list included, so
// that its changelog records all say the new task count (SetTaskCount).
// The changes are then in the new stores' Changes.
func Redistribute(old, new []*Store) error {
	if len(new) == 0 {
		return errors.New("redistributing operator state: no tasks to give it to")
	}
	for _, s := range new {
		if err := s.writable(); err != nil {
			return err
		}
		if keyed := KeyedStates(s); len(keyed) > 0 {
			return fmt.Errorf("redistributing state of store %q: it keeps keyed state (%v), which cannot be moved to other tasks", s.name, keyed)
		}
	}
	names := make([]string, 0, len(new[0].states))
	for name := range new[0].states {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		kind := new[0].states[name].kind
		var all [][]byte
		for _, s := range old {
			st, ok := s.states[name]
			if !ok || st.kind != kind {
				return fmt.Errorf("redistributing state %q: the old store of task %d does not register it as %s", name, s.task, kind)
			}
			elems, err := s.operatorElems(st)
			if err != nil {
				return err
			}
			all = append(all, elems...)
		}
		for t, s := range new {
			st, ok := s.states[name]
			if !ok || st.kind != kind {
				return fmt.Errorf("redistributing state %q: the new store of task %d does not register it as %s", name, s.task, kind)
			}
			part := all
			if kind == kindOperatorList {
				part = all[t*len(all)/len(new) : (t+1)*len(all)/len(new)]
			}
			buf := appendOperatorValue(s.header(st), s.taskCount, part)
			s.set(st, s.key(st, nil), buf, -1)
			s.wbuf = buf[:0]
		}
	}
	return nil
}
