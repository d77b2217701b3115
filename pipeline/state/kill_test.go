package state

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// killChild is set, to "persist" or "no-persist" and a directory, in the
// environment of the child process TestPersistSurvivesSIGKILL starts.
const killChild = "STATE_TEST_KILL_CHILD"

// TestPersistSurvivesSIGKILL commits three checkpoints to a pebble store
// in a child process that then kills itself with SIGKILL. With Persist
// after the commits, as the runtime calls it at every checkpoint, the
// reopened store has them all. Without it they were still in pebble's
// log buffer and are gone: the kill is shown to have bitten.
func TestPersistSurvivesSIGKILL(t *testing.T) {
	if mode, dir := os.Getenv(killChild), os.Getenv(killChild+"_DIR"); mode != "" {
		killChildMain(mode, dir)
		return
	}
	const want = 3*1000 + 99
	for _, tc := range []struct {
		mode    string
		applied int64
	}{{"persist", want}, {"no-persist", -1}} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestPersistSurvivesSIGKILL$")
			cmd.Env = append(os.Environ(), killChild+"="+tc.mode, killChild+"_DIR="+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was not killed by SIGKILL: %v\n%s", err, out)
			}
			b, err := OpenPebble(dir, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			s, err := Open(b, "kill", 0, testFP, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.AppliedOffset(); got != tc.applied {
				t.Fatalf("applied offset %d after the kill, want %d", got, tc.applied)
			}
			if tc.applied < 0 {
				return
			}
			v, err := NewValue[int](s, "v", TTLConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for k := range 100 {
				got, ok, err := v.Get(fmt.Appendf(nil, "k%d", k))
				if err != nil || !ok || got != 2 {
					t.Fatalf("k%d = %d, %v, %v after the kill; want 2 (the third checkpoint's)", k, got, ok, err)
				}
			}
		})
	}
}

func killChildMain(mode, dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	b, err := OpenPebble(dir, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		fail(err)
	}
	s, err := Open(b, "kill", 0, testFP, nil)
	if err != nil {
		fail(err)
	}
	v, err := NewValue[int](s, "v", TTLConfig{})
	if err != nil {
		fail(err)
	}
	for cp := range 3 {
		for k := range 100 {
			if err := v.Put(fmt.Appendf(nil, "k%d", k), cp); err != nil {
				fail(err)
			}
		}
		s.Changes()
		if err := s.Commit(int64((cp+1)*1000 + 99)); err != nil {
			fail(err)
		}
	}
	if mode == "persist" {
		if err := b.Persist(); err != nil {
			fail(err)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
