package state

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStoresOfManyTasksShareABackend runs one store per task on its own
// goroutine over one backend, as the runtime does (run it with -race).
func TestStoresOfManyTasksShareABackend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bk backendKind) {
		b := bk.new(t)
		const tasks = 6
		errs := make([]error, tasks)
		var wg sync.WaitGroup
		for task := range int32(tasks) {
			wg.Go(func() { errs[task] = runTask(b, task) })
		}
		wg.Wait()
		for task, err := range errs {
			if err != nil {
				t.Errorf("task %d: %v", task, err)
			}
		}
	})
}

func runTask(b Backend, task int32) error {
	s, err := Open(b, "count", task, testFP, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := NewReducing(s, "n", sum, TTLConfig{})
	if err != nil {
		return err
	}
	var l changelog
	for i := range 2000 {
		if err := r.Add(fmt.Appendf(nil, "k%d", i%50), int(task)); err != nil {
			return err
		}
		if i%100 == 99 {
			if err := s.Commit(l.produce(s.Changes())); err != nil {
				return err
			}
		}
	}
	got, _, err := r.Get([]byte("k7"))
	if err != nil {
		return err
	}
	if want := 40 * int(task); got != want {
		return fmt.Errorf("k7 = %d; want %d", got, want)
	}
	return nil
}
