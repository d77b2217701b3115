package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Proxy is a Kafka-protocol-aware TCP proxy that a test puts between a
// client (the pipeline process) and the broker, to inject network faults on
// every broker alike: cut connections, requests that never arrive, answers
// that never come back.
//
// A plain TCP proxy would not do: clients connect to the addresses the
// broker advertises, so the proxy rewrites those (in Metadata,
// FindCoordinator and DescribeCluster responses) to a listener of its own
// per broker, opened the first time a broker is seen. Every other frame is
// forwarded byte for byte. Plaintext only: TLS would hide the frames, and
// SASL's unframed v0 handshake has no request header to read.
//
// Each client connection has two goroutines, one per direction; each
// listener has an accept goroutine; a cut schedule has one. Close stops them
// all and waits for them. Every method is safe for concurrent use.
type Proxy struct {
	ctx    context.Context // ends at Close: stops dials and schedules
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	seeds     []*proxyListener
	listeners map[string]*proxyListener // by upstream (broker) address
	conns     map[*proxyConn]struct{}
	firstErr  error // the first protocol error: a bug in the proxy or a broken frame

	faults [kmsg.MaxKey + 1]faultBudget

	delayMu    sync.Mutex
	delayMatch func(topic string, id [16]byte, partition int32) bool
	delay      time.Duration
	delayed    atomic.Int64

	connections, requests, rewritten atomic.Int64
	cuts, connsCut, lost, failed     atomic.Int64
	errored, corrupted               atomic.Int64
	byKey                            [kmsg.MaxKey + 1]atomic.Int64
}

// ProxyStats are the proxy's counters since it started.
type ProxyStats struct {
	// Listeners is how many addresses the proxy listens on: one per seed
	// and per broker address seen in responses (shared where they agree).
	Listeners int
	// Connections is how many client connections were accepted and joined
	// to a broker connection; Open how many are open now.
	Connections, Open int64
	// Requests is how many requests the proxy forwarded to a broker (counted
	// as it writes them, so before their answers can arrive).
	Requests int64
	// Rewritten is how many responses had broker addresses rewritten.
	Rewritten int64
	// Cuts is how many times CutAll ran (schedules included); ConnsCut how
	// many connections those cuts closed.
	Cuts, ConnsCut int64
	// AnswersLost counts responses dropped by LoseAnswers (the broker
	// acted, the client never heard); RequestsFailed counts requests
	// dropped by FailRequests (the broker never saw them).
	AnswersLost, RequestsFailed int64
}

func (s ProxyStats) String() string {
	return fmt.Sprintf("%d listeners, %d connections (%d open), %d requests, %d responses rewritten, %d cuts closing %d connections, %d answers lost, %d requests failed",
		s.Listeners, s.Connections, s.Open, s.Requests, s.Rewritten, s.Cuts, s.ConnsCut, s.AnswersLost, s.RequestsFailed)
}

// faultBudget is how many requests of one key are still to fail or to have
// their answers lost. gen changes at Heal, so that a turn taken before it is
// not given back after it.
type faultBudget struct {
	lose, fail, gen atomic.Int64
	// errs answers with errCode in place of the broker's success.
	errs    atomic.Int64
	errCode atomic.Int32
	// corrupt breaks a record batch's CRC in a request on its way.
	corrupt atomic.Int64
}

// errProxyClosed is the proxy shutting down, not a fault of what it read.
var errProxyClosed = errors.New("proxy: closed")

// proxyListener is one listening address of the proxy, standing for one
// broker address.
type proxyListener struct {
	ln       net.Listener
	upstream string
	host     string
	port     int32
}

// NewProxy starts a proxy with one listener per seed broker address. Clients
// are given Addrs in place of the seeds.
func NewProxy(seeds []string) (*Proxy, error) {
	if len(seeds) == 0 {
		return nil, errors.New("proxy: no seed broker")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[string]*proxyListener),
		conns:     make(map[*proxyConn]struct{}),
	}
	for _, s := range seeds {
		p.mu.Lock()
		l, err := p.listenLocked(s)
		p.mu.Unlock()
		if err != nil {
			p.Close()
			return nil, err
		}
		p.seeds = append(p.seeds, l)
	}
	return p, nil
}

// Addrs are the seed listeners' addresses, in the order of the seeds.
func (p *Proxy) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.seeds))
	for i, l := range p.seeds {
		out[i] = l.ln.Addr().String()
	}
	return out
}

// Listening reports whether addr is one of the proxy's listeners.
func (p *Proxy) Listening(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.listeners {
		if l.ln.Addr().String() == addr {
			return true
		}
	}
	return false
}

// listenLocked opens a listener standing for upstream, or returns the one
// already open. p.mu is held.
func (p *Proxy) listenLocked(upstream string) (*proxyListener, error) {
	if l, ok := p.listeners[upstream]; ok {
		return l, nil
	}
	if p.closed {
		return nil, errProxyClosed
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listening for %s: %w", upstream, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	l := &proxyListener{ln: ln, upstream: upstream, host: addr.IP.String(), port: int32(addr.Port)}
	p.listeners[upstream] = l
	p.wg.Add(1)
	go p.accept(l)
	return l, nil
}

func (p *Proxy) accept(l *proxyListener) {
	defer p.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed by Close
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.join(c, l.upstream)
	}
}

// join dials the broker for a newly accepted client connection and starts
// forwarding both ways.
func (p *Proxy) join(client net.Conn, upstream string) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 10 * time.Second}
	broker, err := d.DialContext(p.ctx, "tcp", upstream)
	if err != nil {
		// The client sees its connection closed, as it would had the
		// broker been unreachable.
		client.Close()
		return
	}
	pc := &proxyConn{p: p, client: client, broker: broker, inflight: make(map[int32]inflight)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		broker.Close()
		return
	}
	p.conns[pc] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	p.connections.Add(1)
	go pc.requests()
	go pc.responses()
}

// LoseAnswers makes the proxy forward the next n requests of key to the
// broker and then, when each answer arrives, close the client's connection
// instead of returning it: the broker acted, the client never learns how.
// A request whose connection is cut before its answer arrives gives its
// turn back.
func (p *Proxy) LoseAnswers(key kmsg.Key, n int) { p.faults[key].lose.Add(int64(n)) }

// FailRequests makes the proxy close the client's connection instead of
// forwarding the next n requests of key: the broker never sees them.
func (p *Proxy) FailRequests(key kmsg.Key, n int) { p.faults[key].fail.Add(int64(n)) }

// ErrorProduceAnswers forwards the next n Produce requests, then answers
// each with code on every partition in place of the broker's answer: the
// broker wrote the records (in the open transaction, for a transactional
// producer) and the client is told it failed. Errored counts them.
func (p *Proxy) ErrorProduceAnswers(code int16, n int) {
	b := &p.faults[kmsg.Produce]
	b.errCode.Store(int32(code))
	b.errs.Add(int64(n))
}

// CorruptProduceRequests breaks the CRC of one record batch in each of the
// next n Produce requests on their way to the broker, as a corrupted
// transfer would: the broker refuses that batch (CORRUPT_MESSAGE) and writes
// nothing of it, and the client, which does not resend a batch the broker
// found corrupt, fails its records. Corrupted counts them.
func (p *Proxy) CorruptProduceRequests(n int) { p.faults[kmsg.Produce].corrupt.Add(int64(n)) }

// CancelCorruption takes back the turns of CorruptProduceRequests not yet
// used, and returns how many there were.
func (p *Proxy) CancelCorruption() int64 { return p.faults[kmsg.Produce].corrupt.Swap(0) }

// Corrupted returns how many requests CorruptProduceRequests broke.
func (p *Proxy) Corrupted() int64 { return p.corrupted.Load() }

// Errored returns how many answers ErrorProduceAnswers replaced.
func (p *Proxy) Errored() int64 { return p.errored.Load() }

// Heal cancels what is left of key's LoseAnswers and FailRequests and
// returns it: the fault is over, whatever the client did meanwhile.
func (p *Proxy) Heal(key kmsg.Key) (lose, fail int64) {
	b := &p.faults[key]
	b.gen.Add(1)
	return b.lose.Swap(0), b.fail.Swap(0)
}

// take consumes one unit of a fault budget, if any is left.
func take(budget *atomic.Int64) bool {
	for {
		n := budget.Load()
		if n <= 0 {
			return false
		}
		if budget.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// CutAll closes every open connection, both sides, and returns how many it
// closed. It counts as a cut even if none was open.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	n := 0
	for _, pc := range conns {
		if pc.close() {
			n++
		}
	}
	p.cuts.Add(1)
	p.connsCut.Add(int64(n))
	return n
}

// CutSchedule cuts every connection at random gaps between Min and Max,
// drawn from a generator seeded with Seed so that a run can be replayed.
type CutSchedule struct {
	Min, Max time.Duration
	Seed     uint64
	// Before and After, if set, run on the schedule's goroutine just
	// before and just after cut number i (from 1), so a test can see what
	// each cut hit. They must not call t.Fatal.
	Before, After func(i int)
}

// StartCuts runs s until the returned stop is called or the proxy closes.
// stop waits for the schedule's goroutine and returns the cuts it made; it
// may be called more than once.
func (p *Proxy) StartCuts(s CutSchedule) (stop func() int) {
	if s.Max < s.Min {
		s.Max = s.Min
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0))
	done := make(chan struct{})
	var fired int
	var wg sync.WaitGroup
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return func() int { return 0 }
	}
	p.wg.Add(1)
	wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer wg.Done()
		for {
			gap := s.Min
			if s.Max > s.Min {
				gap += time.Duration(rng.Int64N(int64(s.Max - s.Min)))
			}
			timer := time.NewTimer(gap)
			select {
			case <-done:
				timer.Stop()
				return
			case <-p.ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			fired++
			if s.Before != nil {
				s.Before(fired)
			}
			p.CutAll()
			if s.After != nil {
				s.After(fired)
			}
		}
	}()
	var once sync.Once
	return func() int {
		once.Do(func() { close(done) })
		wg.Wait()
		return fired
	}
}

// Stats returns the counters.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	open, listeners := int64(len(p.conns)), len(p.listeners)
	p.mu.Unlock()
	return ProxyStats{
		Listeners:      listeners,
		Connections:    p.connections.Load(),
		Open:           open,
		Requests:       p.requests.Load(),
		Rewritten:      p.rewritten.Load(),
		Cuts:           p.cuts.Load(),
		ConnsCut:       p.connsCut.Load(),
		AnswersLost:    p.lost.Load(),
		RequestsFailed: p.failed.Load(),
	}
}

// RequestsOf is how many requests of key reached the broker.
func (p *Proxy) RequestsOf(key kmsg.Key) int64 { return p.byKey[key].Load() }

// Err returns the first protocol error the proxy met (a frame it could not
// parse or a response it could not rewrite); nil in a sound run.
func (p *Proxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstErr
}

func (p *Proxy) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstErr == nil {
		p.firstErr = err
	}
}

// Close stops listening, closes every connection, stops schedules and waits
// for every goroutine of the proxy. It is safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for _, l := range p.listeners {
		l.ln.Close()
	}
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	p.cancel()
	for _, pc := range conns {
		pc.close()
	}
	p.wg.Wait()
}

// proxyConn is one client connection and its broker connection.
type proxyConn struct {
	p              *Proxy
	client, broker net.Conn
	closeOnce      sync.Once

	mu       sync.Mutex
	inflight map[int32]inflight // by correlation id
	closed   bool               // close ran: inflight was emptied
}

// inflight is what the proxy remembers of a request until its response.
type inflight struct {
	key, version int16
	lose         bool
	gen          int64         // of the key's fault budget, when lose was taken
	errCode      int16         // answer with this error (ErrorProduceAnswers)
	delay        time.Duration // hold the answer back this long (DelayFetches)
}

// close closes both sides; only the first call does anything, and it alone
// returns true. Turns of LoseAnswers taken by requests still waiting for
// their answers go back to the budget: those answers were not lost by the
// proxy's doing.
func (pc *proxyConn) close() bool {
	closed := false
	pc.closeOnce.Do(func() {
		closed = true
		pc.client.Close()
		pc.broker.Close()
		pc.mu.Lock()
		pc.closed = true
		for corr, f := range pc.inflight {
			if b := &pc.p.faults[f.key]; f.lose && b.gen.Load() == f.gen {
				b.lose.Add(1)
			}
			delete(pc.inflight, corr)
		}
		pc.mu.Unlock()
		pc.p.mu.Lock()
		delete(pc.p.conns, pc)
		pc.p.mu.Unlock()
	})
	return closed
}

// requests forwards client → broker.
func (pc *proxyConn) requests() {
	defer pc.p.wg.Done()
	defer pc.close()
	r := bufio.NewReaderSize(pc.client, 64<<10)
	for {
		frame, err := readFrame(r)
		if err != nil {
			if !isClosed(err) {
				pc.p.fail(fmt.Errorf("proxy: reading a request: %w", err))
			}
			return
		}
		// Request header v0+: api key, api version, correlation id.
		if len(frame) < 4+8 {
			pc.p.fail(fmt.Errorf("proxy: request frame of %d bytes", len(frame)))
			return
		}
		key := int16(binary.BigEndian.Uint16(frame[4:]))
		version := int16(binary.BigEndian.Uint16(frame[6:]))
		corr := int32(binary.BigEndian.Uint32(frame[8:]))
		known := key >= 0 && key <= kmsg.MaxKey
		if known && take(&pc.p.faults[key].fail) {
			pc.p.failed.Add(1)
			return
		}
		f := inflight{key: key, version: version}
		if known {
			b := &pc.p.faults[key]
			f.gen = b.gen.Load()
			f.lose = take(&b.lose)
			if kmsg.Key(key) == kmsg.Produce && !f.lose && take(&b.errs) {
				f.errCode = int16(b.errCode.Load())
			}
			if kmsg.Key(key) == kmsg.Produce && !f.lose && f.errCode == 0 && take(&b.corrupt) {
				broke, err := corruptBatch(frame, version)
				if err != nil {
					pc.p.fail(err)
					return
				}
				if broke {
					pc.p.corrupted.Add(1)
				} else {
					b.corrupt.Add(1) // no batch to break: the next request's turn
				}
			}
		}
		if kmsg.Key(key) == kmsg.Fetch {
			if f.delay, err = pc.p.fetchDelay(frame, version); err != nil {
				pc.p.fail(err)
				return
			}
		}
		pc.mu.Lock()
		pc.inflight[corr] = f
		pc.mu.Unlock()
		// Count before forwarding: the answer can reach the client, and
		// the client's caller read the counts, before Write returns.
		pc.p.requests.Add(1)
		if known {
			pc.p.byKey[key].Add(1)
		}
		if _, err := pc.broker.Write(frame); err != nil {
			return
		}
	}
}

// responses forwards broker → client, rewriting broker addresses.
func (pc *proxyConn) responses() {
	defer pc.p.wg.Done()
	defer pc.close()
	r := bufio.NewReaderSize(pc.broker, 64<<10)
	for {
		frame, err := readFrame(r)
		if err != nil {
			if !isClosed(err) {
				pc.p.fail(fmt.Errorf("proxy: reading a response: %w", err))
			}
			return
		}
		if len(frame) < 4+4 {
			pc.p.fail(fmt.Errorf("proxy: response frame of %d bytes", len(frame)))
			return
		}
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		pc.mu.Lock()
		f, ok := pc.inflight[corr]
		delete(pc.inflight, corr)
		closed := pc.closed
		pc.mu.Unlock()
		if !ok && closed {
			// A response read ahead into the buffer before the
			// connection was closed: close forgot its request.
			return
		}
		if !ok {
			pc.p.fail(fmt.Errorf("proxy: a response with correlation id %d that no request had", corr))
			return
		}
		if f.lose {
			pc.p.lost.Add(1)
			return // the deferred close drops the answer with the connection
		}
		if f.delay > 0 {
			// Answers on a connection go back in order: the ones
			// behind this wait too, as they would behind a slow one.
			select {
			case <-time.After(f.delay):
			case <-pc.p.ctx.Done():
				return
			}
			pc.p.delayed.Add(1)
		}
		rewrite := f.errCode != 0
		switch kmsg.Key(f.key) {
		case kmsg.Metadata, kmsg.FindCoordinator, kmsg.DescribeCluster:
			rewrite = true
		}
		if rewrite {
			if frame, err = pc.p.rewrite(frame, f); err != nil {
				// Forwarding it unchanged would let the client bypass
				// the proxy.
				if !errors.Is(err, errProxyClosed) {
					pc.p.fail(err)
				}
				return
			}
		}
		if _, err := pc.client.Write(frame); err != nil {
			return
		}
	}
}

// corruptBatch flips the CRC of the first record batch in a Produce request
// frame, in place, and reports whether there was one.
func corruptBatch(frame []byte, version int16) (bool, error) {
	req := kmsg.NewPtrProduceRequest()
	body, err := decodeRequest(frame, version, req)
	if err != nil {
		return false, err
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			// A batch: base offset (8), length (4), leader epoch (4),
			// magic (1), then the CRC (4) of everything after it.
			const crcAt = 17
			if len(p.Records) < crcAt+4 {
				continue
			}
			i := bytes.Index(frame[body:], p.Records)
			if i < 0 {
				return false, errors.New("proxy: a produce request's records are not where they were decoded from")
			}
			frame[body+i+crcAt] ^= 0xff
			return true, nil
		}
	}
	return false, nil
}

// decodeRequest decodes the body of a request frame of the given version
// into req and returns where the body starts.
func decodeRequest(frame []byte, version int16, req kmsg.Request) (int, error) {
	req.SetVersion(version)
	// Request header v1+: size, key, version, correlation id, client id;
	// then tagged fields when the request is flexible.
	body := 4 + 8
	if len(frame) < body+2 {
		return 0, fmt.Errorf("proxy: %s request frame of %d bytes", kmsg.NameForKey(req.Key()), len(frame))
	}
	if n := int16(binary.BigEndian.Uint16(frame[body:])); n > 0 {
		body += int(n)
	}
	body += 2
	if req.IsFlexible() {
		n, err := skipTags(frame[body:])
		if err != nil {
			return 0, fmt.Errorf("proxy: %s v%d request header: %w", kmsg.NameForKey(req.Key()), version, err)
		}
		body += n
	}
	if err := req.ReadFrom(frame[body:]); err != nil {
		return 0, fmt.Errorf("proxy: decoding a %s v%d request: %w", kmsg.NameForKey(req.Key()), version, err)
	}
	return body, nil
}

// DelayFetches holds back, by d each, the answers to Fetch requests that
// read a partition match accepts (by topic name or, from Fetch v13 on,
// topic id), as a slow network or a broker reading from disk would; d = 0
// stops it. Delayed counts them.
func (p *Proxy) DelayFetches(match func(topic string, id [16]byte, partition int32) bool, d time.Duration) {
	p.delayMu.Lock()
	p.delayMatch, p.delay = match, d
	p.delayMu.Unlock()
}

// Delayed is how many Fetch answers DelayFetches held back.
func (p *Proxy) Delayed() int64 { return p.delayed.Load() }

// fetchDelay is how long to hold back the answer to a Fetch request frame.
func (p *Proxy) fetchDelay(frame []byte, version int16) (time.Duration, error) {
	p.delayMu.Lock()
	match, d := p.delayMatch, p.delay
	p.delayMu.Unlock()
	if d == 0 || match == nil {
		return 0, nil
	}
	req := kmsg.NewPtrFetchRequest()
	if _, err := decodeRequest(frame, version, req); err != nil {
		return 0, err
	}
	for _, t := range req.Topics {
		for _, pt := range t.Partitions {
			if match(t.Topic, t.TopicID, pt.Partition) {
				return d, nil
			}
		}
	}
	return 0, nil
}

// readFrame reads one size-prefixed frame, prefix included.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > 1<<30 {
		return nil, fmt.Errorf("frame size %d", n)
	}
	frame := make([]byte, 4+int(n))
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return frame, nil
}

// isClosed reports whether a read error is the connection ending (closed by
// either peer or by the proxy, or reset) rather than a malformed stream.
func isClosed(err error) bool {
	var op *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &op)
}

// rewrite replaces the broker addresses in a Metadata, FindCoordinator or
// DescribeCluster response with the proxy's listeners for those brokers.
func (p *Proxy) rewrite(frame []byte, f inflight) ([]byte, error) {
	req := kmsg.RequestForKey(f.key)
	if req == nil {
		return nil, fmt.Errorf("proxy: no request type for key %d", f.key)
	}
	req.SetVersion(f.version)
	// Response header: the correlation id, then tagged fields when the
	// request version is flexible (ApiVersions keeps header v0 always).
	hdr := 4
	if req.IsFlexible() && kmsg.Key(f.key) != kmsg.ApiVersions {
		n, err := skipTags(frame[4+4:])
		if err != nil {
			return nil, fmt.Errorf("proxy: %s v%d response header: %w", kmsg.NameForKey(f.key), f.version, err)
		}
		hdr += n
	}
	resp := req.ResponseKind()
	resp.SetVersion(f.version)
	if err := resp.ReadFrom(frame[4+hdr:]); err != nil {
		return nil, fmt.Errorf("proxy: decoding a %s v%d response: %w", kmsg.NameForKey(f.key), f.version, err)
	}
	to := func(host *string, port *int32) error {
		if *host == "" || *port <= 0 {
			return nil // an error answer names no broker
		}
		p.mu.Lock()
		l, err := p.listenLocked(net.JoinHostPort(*host, strconv.Itoa(int(*port))))
		p.mu.Unlock()
		if err != nil {
			return err
		}
		*host, *port = l.host, l.port
		return nil
	}
	var err error
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			err = errors.Join(err, to(&r.Brokers[i].Host, &r.Brokers[i].Port))
		}
	case *kmsg.FindCoordinatorResponse:
		err = to(&r.Host, &r.Port)
		for i := range r.Coordinators {
			err = errors.Join(err, to(&r.Coordinators[i].Host, &r.Coordinators[i].Port))
		}
	case *kmsg.DescribeClusterResponse:
		for i := range r.Brokers {
			err = errors.Join(err, to(&r.Brokers[i].Host, &r.Brokers[i].Port))
		}
	case *kmsg.ProduceResponse:
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				r.Topics[i].Partitions[j].ErrorCode = f.errCode
			}
		}
		p.errored.Add(1)
	}
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4, len(frame)+64)
	out = append(out, frame[4:4+hdr]...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	p.rewritten.Add(1)
	return out, nil
}

// skipTags returns the length of a tagged-field section at the start of b.
func skipTags(b []byte) (int, error) {
	off := 0
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(b[off:])
		if n <= 0 {
			return 0, errors.New("truncated tagged fields")
		}
		off += n
		return v, nil
	}
	count, err := uvarint()
	if err != nil {
		return 0, err
	}
	for range count {
		if _, err := uvarint(); err != nil { // tag
			return 0, err
		}
		size, err := uvarint()
		if err != nil {
			return 0, err
		}
		if uint64(len(b)-off) < size {
			return 0, errors.New("truncated tagged field")
		}
		off += int(size)
	}
	return off, nil
}
