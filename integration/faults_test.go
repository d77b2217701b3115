package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// instanceGroup is the instances of one pipeline sharing its consumer
// group, each under its own instance_id and config file: what the churn and
// soak scenarios add to, remove from and hurt.
//
// Its methods assert, and so belong on the test goroutine.
type instanceGroup struct {
	t    testing.TB
	e    *env
	cfgs map[string]string   // instance id → config file
	live map[string]*Process // started and not stopped by the test (a SIGSTOPped one included)
}

func newInstanceGroup(t testing.TB, e *env, cfgs map[string]string) *instanceGroup {
	return &instanceGroup{t: t, e: e, cfgs: cfgs, live: map[string]*Process{}}
}

// running returns the ids of the live instances, sorted.
func (g *instanceGroup) running() []string { return slices.Sorted(maps.Keys(g.live)) }

// down returns the ids of the instances not running, sorted.
func (g *instanceGroup) down() []string {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(g.cfgs)) {
		if g.live[id] == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func (g *instanceGroup) start(id string) *Process {
	g.t.Helper()
	if g.live[id] != nil {
		g.t.Fatalf("instance %s is already running (pid %d)", id, g.live[id].Pid())
	}
	p := g.e.startPipeline(g.cfgs[id])
	g.live[id] = p
	return p
}

// kill SIGKILLs instance id, asserting that the signal ended it.
func (g *instanceGroup) kill(id string) int {
	g.t.Helper()
	p := g.live[id]
	p.Kill()
	delete(g.live, id)
	return p.Pid()
}

// term SIGTERMs instance id, asserting that it exits with status 0.
func (g *instanceGroup) term(id string) int {
	g.t.Helper()
	p := g.live[id]
	p.Term()
	delete(g.live, id)
	return p.Pid()
}

// termAll SIGTERMs every live instance.
func (g *instanceGroup) termAll() {
	g.t.Helper()
	for _, id := range g.running() {
		g.term(id)
	}
}

// exited reports a live instance that has exited on its own: a pipeline
// must ride out every fault the tests inject without giving up.
func (g *instanceGroup) exited() error {
	for _, id := range g.running() {
		p := g.live[id]
		select {
		case <-p.Exited():
			return fmt.Errorf("instance %s (pid %d) exited on its own (%s):\n%s", id, p.Pid(), describeExit(p.c), p.Tail(40))
		default:
		}
	}
	return nil
}

// watch waits d, failing early with exited's error if an instance exits.
func (g *instanceGroup) watch(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if err := g.exited(); err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if err := sleepCtx(ctx, min(left, 250*time.Millisecond)); err != nil {
			return err
		}
	}
}

// groupOwners returns which partitions of topic each member of the group
// owns, by instance id, and the group's state. Only a Stable group's answer
// is an assignment the members work on.
func groupOwners(ctx context.Context, adm *kadm.Client, group, topic string) (string, map[string][]int32, error) {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "", nil, err
	}
	d, ok := described[group]
	if !ok {
		return "", nil, fmt.Errorf("group %s not described", group)
	}
	if d.Err != nil {
		return "", nil, fmt.Errorf("describing group %s: %w", group, d.Err)
	}
	owners := make(map[string][]int32)
	for _, m := range d.Members {
		id := m.MemberID
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		owners[id] = []int32{}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, at := range c.Topics {
				if at.Topic == topic {
					owners[id] = append(owners[id], at.Partitions...)
				}
			}
		}
		slices.Sort(owners[id])
	}
	return d.State, owners, nil
}

// ownersString renders an assignment in instance order.
func ownersString(owners map[string][]int32) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(owners)) {
		parts = append(parts, fmt.Sprintf("%s:%v", id, owners[id]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// logMark is a position in a process's log: what it wrote before a step.
type logMark struct {
	path string
	off  int64
}

func markLog(p *Process) logMark {
	m := logMark{path: p.LogPath()}
	if st, err := os.Stat(m.path); err == nil {
		m.off = st.Size()
	}
	return m
}

// restoredTasks returns the tasks whose state of the given step the log
// says were restored from the changelog since the mark (the pipeline's
// "state restored" line, logged when a task it was given had state to
// restore), with how many times each.
func restoredTasks(m logMark, step string) (map[int32]int, error) {
	f, err := os.Open(m.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(m.off, io.SeekStart); err != nil {
		return nil, err
	}
	got := make(map[int32]int)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="state restored"`) || !strings.Contains(line, " step="+step+" ") {
			continue
		}
		for field := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(field, "task="); ok {
				if n, err := strconv.ParseInt(v, 10, 32); err == nil {
					got[int32(n)]++
				}
			}
		}
	}
	return got, sc.Err()
}

// procState is the state letter of a process (R, S, T for stopped, ...):
// from /proc, or from ps where there is no /proc.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat("/proc/self/stat"); serr != nil {
			out, perr := exec.Command("ps", "-o", "state=", "-p", strconv.Itoa(pid)).Output()
			if s := strings.TrimSpace(string(out)); perr == nil && s != "" {
				return s[0], nil
			}
		}
	}
	if err != nil {
		return 0, err
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	return b[i+2], nil
}

// waitStopped waits up to bound for the process's state to be (or, with
// want false, to stop being) 'T', stopped by a signal.
func waitStopped(pid int, want bool, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		s, err := procState(pid)
		if err != nil {
			return err
		}
		if (s == 'T') == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d in state %c after %v", pid, s, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committedNow returns the group's committed input offsets, summed. It
// retries for a while: a broker answers COORDINATOR_NOT_AVAILABLE or
// NOT_COORDINATOR for a moment while a group's coordinator starts or moves.
func committedNow(t testing.TB, e *env) int64 {
	t.Helper()
	var c int64
	WaitFor(t, 30*time.Second, "the group's committed offsets", func() (bool, string) {
		var err error
		c, _, err = e.committed()
		return err == nil, fmt.Sprint(err)
	})
	return c
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// faultRun is what a fault acts on: the group of instances under test and
// the settings that decide how long a fault must last to mean something.
type faultRun struct {
	t   *testing.T
	e   *env
	g   *instanceGroup
	rng *rand.Rand
	// maxInstances bounds add-instance.
	maxInstances int
	// The instances' settings: a pause is shorter or longer than these.
	txnTimeout, sessionTimeout time.Duration
	// proxy, when the instances connect through one, lets net-cut cut
	// their connections to the broker.
	proxy *Proxy
	// feed, when set, lets up to n more input records through, from those
	// held back for the end of the round; it returns how many it let
	// through. A fault that needs the instances to be producing uses it
	// when they have caught up with the input.
	feed func(n int) int
}

// fault is one kind of trouble the soak can cause. apply causes it and
// returns what it did, or an error when it cannot show that the fault
// happened; applies (nil: always) says whether the group's present shape
// allows it.
type fault struct {
	name    string
	applies func(*faultRun) bool
	apply   func(*faultRun) (string, error)
}

// faultMenu is what the soak draws from. A new kind of fault (a network cut
// through a proxy, a broker restart through e.broker) is one more line.
var faultMenu = []fault{
	{"sigkill", nil, faultSIGKILL},
	{"sigterm-restart", nil, faultSIGTERMRestart},
	{"sigstop-short", nil, faultPauseShort},
	{"sigstop-long", nil, faultPauseLong},
	{"add-instance", canAddInstance, faultAddInstance},
	{"remove-instance", canRemoveInstance, faultRemoveInstance},
	{"net-cut", func(fr *faultRun) bool { return fr.proxy != nil }, faultNetCut},
	{"produce-error", func(fr *faultRun) bool { return fr.proxy != nil }, faultProduceError},
	{"broker-restart", func(fr *faultRun) bool { return fr.e.broker.CanRestart() }, faultBrokerRestart},
}

// faultProduceError corrupts a batch of the instances' next produce
// request: the broker refuses it, and the checkpoint it belongs to must
// abort and replay.
func faultProduceError(fr *faultRun) (string, error) {
	want := fr.proxy.Corrupted() + 1
	fr.proxy.CorruptProduceRequests(1)
	deadline := time.Now().Add(time.Minute)
	fed, nextFeed := 0, time.Now().Add(2*time.Second)
	for fr.proxy.Corrupted() < want {
		now := time.Now()
		if now.After(deadline) {
			left := fr.proxy.CancelCorruption()
			return "", fmt.Errorf("no produce request came through the proxy within a minute (%d input records fed meanwhile, %d corruption turns cancelled)", fed, left)
		}
		// Instances that have caught up with the input produce nothing.
		if fr.feed != nil && now.After(nextFeed) {
			fed += fr.feed(200)
			nextFeed = now.Add(2 * time.Second)
		}
		if err := sleepCtx(fr.t.Context(), 20*time.Millisecond); err != nil {
			return "", err
		}
	}
	detail := "corrupted a batch of a produce request: the broker refused it (CORRUPT_MESSAGE)"
	if fed > 0 {
		detail += fmt.Sprintf(", after %d held input records were let through to have something produced", fed)
	}
	return detail, nil
}

// faultBrokerRestart stops the broker cleanly (SIGTERM; Stop shows it
// stopped the way it should), keeps it down a moment, and starts it again
// with its data. A crash is not drawn: on the embedded broker it would hide
// later output from read_committed (docs/brokers.md), and the restart test
// covers it on Kafka.
func faultBrokerRestart(fr *faultRun) (string, error) {
	ctx, cancel := context.WithTimeout(fr.t.Context(), 2*time.Minute)
	defer cancel()
	if err := fr.e.broker.Stop(ctx); err != nil {
		return "", fmt.Errorf("stopping the broker: %w", err)
	}
	down := time.Second + time.Duration(fr.rng.Int64N(int64(2*time.Second)))
	if err := sleepCtx(ctx, down); err != nil {
		return "", err
	}
	start := time.Now()
	if err := fr.e.broker.Start(ctx); err != nil {
		return "", fmt.Errorf("starting the broker again: %w", err)
	}
	return fmt.Sprintf("broker stopped (SIGTERM), down %v, back after %v", down.Round(time.Millisecond), time.Since(start).Round(time.Millisecond)), nil
}

// faultNetCut closes every connection between the instances and the
// broker at once, mid-request or not; the clients reconnect by themselves.
func faultNetCut(fr *faultRun) (string, error) {
	n := fr.proxy.CutAll()
	if n == 0 {
		return "", errors.New("the cut closed no connection: the instances are not connected through the proxy")
	}
	return fmt.Sprintf("cut all %d connections through the proxy", n), nil
}

// faultDeck deals faults from the menu in a seeded random order, each kind
// once per pass, so that a short run still sees most kinds. A fault the
// group's shape rules out stays in the deck for a later draw.
type faultDeck struct {
	rng  *rand.Rand
	menu []fault
	left []int
}

func (d *faultDeck) draw(fr *faultRun) (fault, error) {
	for pass := 0; pass < 2; pass++ {
		for i, idx := range d.left {
			f := d.menu[idx]
			if f.applies == nil || f.applies(fr) {
				d.left = slices.Delete(d.left, i, i+1)
				return f, nil
			}
		}
		// Nothing left applies: start a new pass over the whole menu.
		d.left = d.rng.Perm(len(d.menu))
	}
	return fault{}, errors.New("no fault of the menu applies to the group as it is")
}

// victim picks one running instance at random.
func (fr *faultRun) victim() string {
	ids := fr.g.running()
	return ids[fr.rng.IntN(len(ids))]
}

// faultSIGKILL kills a running instance and restarts it under the same
// instance_id after a random moment: its successor fences what it left
// open and takes its partitions back.
func faultSIGKILL(fr *faultRun) (string, error) {
	id := fr.victim()
	pause := time.Duration(fr.rng.Int64N(int64(2 * time.Second)))
	pid := fr.g.kill(id) // asserts the wait status says SIGKILL
	if err := sleepCtx(fr.t.Context(), pause); err != nil {
		return "", err
	}
	p := fr.g.start(id)
	return fmt.Sprintf("SIGKILL %s (pid %d; wait status: killed), restarted after %v as pid %d", id, pid, pause.Round(time.Millisecond), p.Pid()), nil
}

// faultSIGTERMRestart stops a running instance cleanly and restarts it.
func faultSIGTERMRestart(fr *faultRun) (string, error) {
	id := fr.victim()
	pause := time.Duration(fr.rng.Int64N(int64(time.Second)))
	pid := fr.g.term(id) // asserts exit status 0
	if err := sleepCtx(fr.t.Context(), pause); err != nil {
		return "", err
	}
	p := fr.g.start(id)
	return fmt.Sprintf("SIGTERM %s (pid %d; exit status 0), restarted after %v as pid %d", id, pid, pause.Round(time.Millisecond), p.Pid()), nil
}

// faultPauseShort freezes an instance for less than both its session and
// its transaction time-out: the group and the transaction wait for it.
func faultPauseShort(fr *faultRun) (string, error) {
	bound := min(fr.sessionTimeout, fr.txnTimeout) / 2
	return pause(fr, time.Second+time.Duration(fr.rng.Int64N(int64(max(bound-time.Second, time.Millisecond)))))
}

// faultPauseLong freezes an instance for longer than its transaction
// time-out (and so its session time-out): the broker aborts its open
// transaction and the group drops it, so that once resumed it must find
// out and recover by itself; any others take its partitions meanwhile.
func faultPauseLong(fr *faultRun) (string, error) {
	return pause(fr, fr.txnTimeout+time.Second+time.Duration(fr.rng.Int64N(int64(3*time.Second))))
}

func pause(fr *faultRun, d time.Duration) (string, error) {
	id := fr.victim()
	p := fr.g.live[id]
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		return "", fmt.Errorf("SIGSTOP %s (pid %d): %w", id, p.Pid(), err)
	}
	stopped := time.Now()
	// Resume it whatever happens next: a frozen child would outlive the
	// test's attention until its cleanup.
	defer func() { _ = syscall.Kill(p.Pid(), syscall.SIGCONT) }()
	if err := waitStopped(p.Pid(), true, 5*time.Second); err != nil {
		return "", fmt.Errorf("SIGSTOP did not take hold of %s: %w", id, err)
	}
	if err := sleepCtx(fr.t.Context(), d-time.Since(stopped)); err != nil {
		return "", err
	}
	// Still stopped at the end: the pause lasted the whole time.
	if s, err := procState(p.Pid()); err != nil || s != 'T' {
		return "", fmt.Errorf("%s (pid %d) was no longer stopped at the end of its pause: state %c (%v)", id, p.Pid(), s, err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGCONT); err != nil {
		return "", fmt.Errorf("SIGCONT %s (pid %d): %w", id, p.Pid(), err)
	}
	held := time.Since(stopped)
	if err := waitStopped(p.Pid(), false, 5*time.Second); err != nil {
		return "", fmt.Errorf("SIGCONT did not resume %s: %w", id, err)
	}
	return fmt.Sprintf("SIGSTOP %s (pid %d; /proc state T throughout) for %v (transaction time-out %v, session time-out %v), then SIGCONT",
		id, p.Pid(), held.Round(time.Millisecond), fr.txnTimeout, fr.sessionTimeout), nil
}

func canAddInstance(fr *faultRun) bool { return len(fr.g.running()) < fr.maxInstances }

// faultAddInstance starts an instance that is not running and waits for the
// group to give it partitions.
func faultAddInstance(fr *faultRun) (string, error) {
	down := fr.g.down()
	id := down[fr.rng.IntN(len(down))]
	start := time.Now()
	p := fr.g.start(id)
	ctx, cancel := context.WithTimeout(fr.t.Context(), time.Minute)
	defer cancel()
	var owned []int32
	var last string
	err := poll(ctx, func() (bool, error) {
		if err := fr.g.exited(); err != nil {
			return false, err
		}
		state, owners, err := groupOwners(ctx, fr.e.adm, fr.e.group, fr.e.input)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		owned, last = owners[id], fmt.Sprintf("group %s, owners %s", state, ownersString(owners))
		return state == "Stable" && len(owned) > 0, nil
	})
	if err != nil {
		return "", fmt.Errorf("started %s (pid %d), but the group gave it no partition: %v; last seen: %s", id, p.Pid(), err, last)
	}
	return fmt.Sprintf("started %s (pid %d); the group gave it partitions %v after %v", id, p.Pid(), owned, time.Since(start).Round(time.Millisecond)), nil
}

func canRemoveInstance(fr *faultRun) bool { return len(fr.g.running()) > 1 }

// faultRemoveInstance stops an instance cleanly for good (scaling down): the
// others take its partitions once its session times out.
func faultRemoveInstance(fr *faultRun) (string, error) {
	id := fr.victim()
	pid := fr.g.term(id) // asserts exit status 0
	return fmt.Sprintf("SIGTERM %s (pid %d; exit status 0), not restarted: %v take over its partitions", id, pid, fr.g.running()), nil
}
