package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks c and returns every problem as Errors, or nil. Load and
// Parse call it after applying defaults; call it on a Config built or
// changed by hand. It reads the TLS files' metadata, nothing else.
func (c *Config) Validate() error {
	if errs := c.validate(nil); len(errs) > 0 {
		errs.sort()
		return errs
	}
	return nil
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	nodeRE  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`) // no ".": "route.hot" is the output hot of route
	topicRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

var (
	formats           = []string{"json", "string", "bytes"}
	keyFormats        = []string{"string", "json", "bytes"}
	startFroms        = []string{"earliest", "latest"}
	compressions      = []string{"none", "gzip", "snappy", "lz4", "zstd"}
	saslMechanisms    = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	logLevels         = []string{"debug", "info", "warn", "error"}
	logFormats        = []string{"text", "json"}
	minSessionTimeout = 6 * time.Second // the broker's default group.min.session.timeout.ms
)

// checker collects the problems of one Config.
type checker struct {
	c        *Config
	reported func(path string) bool // nil, or whether path has a problem already
	errs     Errors
}

func (k *checker) errorf(path, format string, args ...any) {
	if k.reported != nil && k.reported(path) {
		return
	}
	k.errs = append(k.errs, k.c.fieldError(path, fmt.Sprintf(format, args...)))
}

// sound reports whether none of paths has a problem already: a rule over
// several settings is checked only on values that were read.
func (k *checker) sound(paths ...string) bool {
	return k.reported == nil || !slices.ContainsFunc(paths, k.reported)
}

// validate returns c's problems, unsorted. reported (nil from Validate)
// says which paths Parse found a problem at already: their values are
// defaults standing in for what could not be read, not worth a second
// message.
func (c *Config) validate(reported func(path string) bool) Errors {
	k := &checker{c: c, reported: reported}
	k.identity()
	k.brokers()
	k.security()
	k.clients()
	k.timing()
	k.topics()
	k.graph()
	k.outputs()
	k.sourcePositions()
	k.service()
	k.demo()
	return k.errs
}

func (k *checker) identity() {
	c := k.c
	k.name("name", c.Name, nameRE, `letters, digits, ".", "_" and "-"`)
	if c.InstanceID == "" {
		k.errorf("instance_id", "required: set instance_id or %s (its default, the host name, was not available)", envVar("instance_id"))
	} else {
		k.name("instance_id", c.InstanceID, nameRE, `letters, digits, ".", "_" and "-"`)
	}
	if c.Group == "" && c.Name != "" {
		k.errorf("group", "required")
	}
	if c.Transactions.IDPrefix == "" && c.Name != "" {
		k.errorf("transactions.id_prefix", "required")
	}
}

// name checks a required name against re.
func (k *checker) name(path, name string, re *regexp.Regexp, chars string) {
	switch {
	case name == "":
		k.errorf(path, "required")
	case !re.MatchString(name):
		k.errorf(path, "%q is not a valid name: use %s", name, chars)
	}
}

func (k *checker) brokers() {
	if p := k.c.Embedded.Port; p < 0 || p > 65535 {
		k.errorf("embedded.port", "%d is not a port: use 1 to 65535, or 0 for any free one", p)
	}
	b := k.c.Brokers
	switch {
	case b.Embedded && len(b.Addrs) > 0:
		k.errorf("brokers", `"embedded" cannot be combined with broker addresses`)
	case !b.Embedded && len(b.Addrs) == 0:
		k.errorf("brokers", `required: a list of host:port addresses, or "embedded"`)
	}
	for i, a := range b.Addrs {
		path := fmt.Sprintf("brokers[%d]", i)
		if _, env := k.c.env["brokers"]; env || k.c.Line(path) == 0 {
			path = "brokers"
		}
		switch {
		case strings.EqualFold(a, "embedded"):
			k.errorf(path, `"embedded" cannot be combined with broker addresses`)
		case !isHostPort(a, false):
			k.errorf(path, "%q is not a host:port address", a)
		}
	}
}

// isHostPort reports whether s is host:port with a numeric port; the host
// may be empty (all interfaces) only when emptyHost is set.
func isHostPort(s string, emptyHost bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" && !emptyHost {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 1<<16
}

func (k *checker) security() {
	t := k.c.TLS
	for _, f := range []struct{ path, file string }{
		{"tls.ca_file", t.CAFile}, {"tls.cert_file", t.CertFile}, {"tls.key_file", t.KeyFile},
	} {
		if f.file == "" {
			continue
		}
		switch fi, err := os.Stat(f.file); {
		case err != nil:
			k.errorf(f.path, "cannot read %q: %v", f.file, unwrapPath(err))
		case fi.IsDir():
			k.errorf(f.path, "%q is a directory", f.file)
		}
	}
	if t.CertFile != "" && t.KeyFile == "" {
		k.errorf("tls.key_file", "required with tls.cert_file: a client certificate needs its key")
	}
	if t.KeyFile != "" && t.CertFile == "" {
		k.errorf("tls.cert_file", "required with tls.key_file: a client key needs its certificate")
	}
	if !t.Enabled && t.ServerName != "" {
		k.errorf("tls.server_name", "has no effect unless tls.enabled is true")
	}
	if !t.Enabled && t.InsecureSkipVerify {
		k.errorf("tls.insecure_skip_verify", "has no effect unless tls.enabled is true")
	}

	s := k.c.SASL
	if s.Mechanism == "" {
		for _, f := range []struct{ path, val string }{{"sasl.username", s.Username}, {"sasl.password", s.Password}} {
			if f.val != "" {
				k.errorf("sasl.mechanism", "required when %s is set: one of %s", f.path, list(saslMechanisms))
				break
			}
		}
		return
	}
	if !slices.Contains(saslMechanisms, strings.ToUpper(s.Mechanism)) {
		k.errorf("sasl.mechanism", "must be one of %s, found %q", list(saslMechanisms), s.Mechanism)
	}
	if s.Username == "" {
		k.errorf("sasl.username", "required with sasl.mechanism %s", s.Mechanism)
	}
	if s.Password == "" {
		k.errorf("sasl.password", "required with sasl.mechanism %s", s.Mechanism)
	}
}

// unwrapPath drops the file name an *os.PathError repeats.
func unwrapPath(err error) error {
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (k *checker) clients() {
	c := k.c
	k.oneOf("consumer.start_from", c.Consumer.StartFrom, startFroms)
	if c.Consumer.SessionTimeout < minSessionTimeout {
		k.errorf("consumer.session_timeout", "%s must be at least %s, the brokers' default group.min.session.timeout.ms",
			fmtDuration(c.Consumer.SessionTimeout), fmtDuration(minSessionTimeout))
	}
	positive(k, "consumer.rebalance_timeout", c.Consumer.RebalanceTimeout)
	positive(k, "consumer.fetch_max_bytes", c.Consumer.FetchMaxBytes)
	positive(k, "consumer.fetch_max_partition_bytes", c.Consumer.FetchMaxPartitionBytes)
	positive(k, "consumer.max_poll_records", c.Consumer.MaxPollRecords)

	k.oneOf("producer.compression", c.Producer.Compression, compressions)
	if c.Producer.Linger < 0 {
		k.errorf("producer.linger", "must not be negative, found %s", fmtDuration(c.Producer.Linger))
	}
	positive(k, "producer.batch_max_bytes", c.Producer.BatchMaxBytes)
	positive(k, "producer.max_buffered_records", c.Producer.MaxBufferedRecords)
	positive(k, "producer.max_buffered_bytes", c.Producer.MaxBufferedBytes)
}

// timing checks the checkpoint and transaction time-outs, and that a
// transaction can outlive the checkpoint it carries: the broker aborts a
// transaction older than transactions.timeout, and one checkpoint's
// transaction is open for up to checkpoint.interval (collecting records)
// plus checkpoint.timeout (barrier, prepare, commit).
func (k *checker) timing() {
	cp, tx := k.c.Checkpoint, k.c.Transactions
	ok := positive(k, "checkpoint.interval", cp.Interval)
	ok = positive(k, "checkpoint.timeout", cp.Timeout) && ok
	positive(k, "checkpoint.max_records", cp.MaxRecords)
	positive(k, "checkpoint.failure_timeout", cp.FailureTimeout)
	ok = positive(k, "transactions.timeout", tx.Timeout) && ok
	if ok && tx.Timeout <= cp.Interval+cp.Timeout && k.sound("checkpoint.interval", "checkpoint.timeout", "transactions.timeout") {
		k.errorf("transactions.timeout", "%s must be larger than %s + %s = %s",
			k.show("transactions.timeout", tx.Timeout), k.show("checkpoint.interval", cp.Interval),
			k.show("checkpoint.timeout", cp.Timeout), fmtDuration(cp.Interval+cp.Timeout))
	}
}

// show names a setting with its value and, when it is not from the file,
// where the value came from: "checkpoint.timeout (30s by default)".
func (k *checker) show(path string, v time.Duration) string {
	from := ""
	if name, ok := k.c.env[path]; ok {
		from = " from " + name
	} else if k.c.lines != nil && k.c.Line(path) == 0 {
		from = " by default"
	}
	return fmt.Sprintf("%s (%s%s)", path, fmtDuration(v), from)
}

// graph checks sources and steps: names, the streams they read, and that
// sources, steps and sinks share one namespace of names.
func (k *checker) graph() {
	c := k.c
	names := make(map[string]string) // name -> path of its owner
	claim := func(name, path, field string) {
		if name == "" {
			return
		}
		if first, dup := names[name]; dup {
			k.errorf(path+field, "name %q is already used by %s; sources, steps and sinks share one namespace", name, first)
			return
		}
		names[name] = path
	}

	if len(c.Sources) == 0 {
		k.errorf("sources", "at least one source is required")
	}
	topics := make(map[string]string) // topic -> the source reading it
	for _, s := range c.Sources {
		if !nodeRE.MatchString(s.Name) {
			k.errorf(s.Path, "%q is not a valid source name: use letters, digits, \"_\" and \"-\"", s.Name)
		}
		claim(s.Name, s.Path, "")
		if len(s.Topics) == 0 {
			k.errorf(s.Path+".topics", "required: the topics to read")
		}
		for i, t := range s.Topics {
			path := k.item(s.Path+".topics", i)
			if k.topic(path, t) {
				if first, dup := topics[t]; dup {
					k.errorf(path, "topic %q is already read by %s", t, first)
					continue
				}
				topics[t] = s.Path
			}
		}
		k.oneOf(s.Path+".format", s.Format, formats)
		k.oneOf(s.Path+".key_format", s.KeyFormat, keyFormats)
	}

	streams := make(map[string]bool) // sources and steps, the nodes one can read from
	for _, s := range c.Sources {
		streams[s.Name] = true
	}
	for _, s := range c.Steps {
		if s.Name != "" {
			streams[s.Name] = true
		}
	}
	for i, s := range c.Steps {
		if s.Kind == "" {
			k.errorf(s.Path, "one operator expected, found none")
		}
		if s.Name == "" || !nodeRE.MatchString(s.Name) {
			k.errorf(s.Path+".name", "%q is not a valid step name: use letters, digits, \"_\" and \"-\"", s.Name)
		}
		claim(s.Name, s.Path, ".name")
		if i == 0 && len(s.From) == 0 && len(c.Sources) > 1 {
			k.errorf(s.Path+".from", "required when there are several sources (%s)", strings.Join(sourceNames(c.Sources), ", "))
		}
		for _, f := range s.From {
			k.stream(s.Path+".from", f, streams)
		}
	}
	for _, s := range c.Sinks {
		claim(s.Name, s.Path, "")
	}
}

// stream checks that name, "node" or "node.output", names a source or a
// step. Outputs are the operators' business; the node must exist.
func (k *checker) stream(path, name string, streams map[string]bool) {
	node, _, _ := strings.Cut(name, ".")
	if streams[name] || streams[node] {
		return
	}
	known := make([]string, 0, len(streams))
	for s := range streams {
		known = append(known, s)
	}
	slices.Sort(known)
	k.errorf(path, "unknown stream %q: no source or step is named %q (there are: %s)", name, node, strings.Join(known, ", "))
}

// outputs checks the sinks and the dead-letter topic, and that they write
// where the pipeline reads from neither a loop nor another cluster.
func (k *checker) outputs() {
	c := k.c
	sourceTopics := make(map[string]string)
	for _, s := range c.Sources {
		for _, t := range s.Topics {
			sourceTopics[t] = cmp.Or(sourceTopics[t], s.Path)
		}
	}
	loop := func(path, topic string) {
		if src, ok := sourceTopics[topic]; ok {
			k.errorf(path, "topic %q is also read by %s: the pipeline would read its own output", topic, src)
		}
	}

	if len(c.Sinks) == 0 {
		k.errorf("sinks", "at least one sink is required")
	}
	streams := make(map[string]bool)
	for _, s := range c.Sources {
		streams[s.Name] = true
	}
	for _, s := range c.Steps {
		streams[s.Name] = true
	}
	sinkTopics := make(map[string]string)
	for _, s := range c.Sinks {
		if !nodeRE.MatchString(s.Name) {
			k.errorf(s.Path, "%q is not a valid sink name: use letters, digits, \"_\" and \"-\"", s.Name)
		}
		switch {
		case s.From != "":
			k.stream(s.Path+".from", s.From, streams)
		case len(c.Steps) == 0 && len(c.Sources) > 1:
			k.errorf(s.Path+".from", "required when there are several sources and no steps (%s)", strings.Join(sourceNames(c.Sources), ", "))
		}
		if s.Topic == "" {
			k.errorf(s.Path+".topic", "required")
		} else if k.topic(s.Path+".topic", s.Topic) {
			loop(s.Path+".topic", s.Topic)
			sinkTopics[s.Topic] = cmp.Or(sinkTopics[s.Topic], s.Path)
		}
		k.oneOf(s.Path+".format", s.Format, formats)
		k.oneOf(s.Path+".key_format", s.KeyFormat, keyFormats)
		if s.Partitions < 0 {
			k.errorf(s.Path+".partitions", "must not be negative (0 means topics.partitions), found %d", s.Partitions)
		}
		for _, h := range sortedKeys(s.Headers) {
			if h == "" {
				k.errorf(s.Path+".headers", "a header name is empty")
			} else if s.Headers[h] == "" {
				k.errorf(s.Path+".headers."+h, "an expression is required")
			}
		}
	}

	if t := c.DeadLetter.Topic; t != "" && k.topic("dead_letter.topic", t) {
		loop("dead_letter.topic", t)
		if sink, ok := sinkTopics[t]; ok {
			k.errorf("dead_letter.topic", "topic %q is also written by %s: dead letters would mix with its output", t, sink)
		}
	}

	switch c.State.Backend {
	case "memory", "":
	case "pebble":
		if c.State.Dir == "" {
			k.errorf("state.dir", "required with state.backend pebble")
		}
	default:
		k.errorf("state.backend", "must be memory or pebble, found %q", c.State.Backend)
	}

	if t := c.Audit.Topic; c.Audit.Enabled && t != "" && k.topic("audit.topic", t) {
		loop("audit.topic", t)
		if sink, ok := sinkTopics[t]; ok {
			k.errorf("audit.topic", "topic %q is also written by %s: progress records would mix with its output", t, sink)
		}
		if t == c.DeadLetter.Topic {
			k.errorf("audit.topic", "topic %q is also the dead-letter topic", t)
		}
	}

	for _, ref := range c.clusters {
		if !sameBrokers(ref.brokers, c.Brokers) {
			k.errorf(ref.path, "a Kafka transaction cannot span clusters; sources, sinks and the dead-letter topic must use the top-level brokers")
		}
	}
}

// Headers audit.source_positions sets on sink records; the pipeline
// package writes them, the audit reads them.
var positionHeaders = []string{"pipeline.source", "pipeline.output"}

// sourcePositions checks that audit.source_positions can mean what it says:
// the audit that checks the positions runs, and no sink header takes their
// names.
func (k *checker) sourcePositions() {
	c := k.c
	if !c.Audit.SourcePositions {
		return
	}
	if !c.Audit.Enabled {
		k.errorf("audit.source_positions", "needs audit.enabled: the positions are checked against the progress records, which audit.enabled: false turns off")
	}
	// That each step writes a record for one input is the graph's to
	// check: engine.Build asks each step (pipeline.Merger).
	for _, s := range c.Sinks {
		for _, h := range positionHeaders {
			if _, ok := s.Headers[h]; ok {
				k.errorf(s.Path+".headers."+h, "header %q is the one audit.source_positions sets; choose another name", h)
			}
		}
	}
}

// sameBrokers reports whether a and b name the same cluster: both
// embedded, or the same addresses in any order.
func sameBrokers(a, b Brokers) bool {
	if a.Embedded || b.Embedded {
		return a.Embedded == b.Embedded && len(a.Addrs) == len(b.Addrs)
	}
	x, y := slices.Clone(a.Addrs), slices.Clone(b.Addrs)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func (k *checker) service() {
	c := k.c
	k.oneOf("log.level", c.Log.Level, logLevels)
	k.oneOf("log.format", c.Log.Format, logFormats)
	if c.Metrics.Listen != "" && !isHostPort(c.Metrics.Listen, true) {
		k.errorf("metrics.listen", "%q is not a host:port address (\":9090\" listens on all interfaces)", c.Metrics.Listen)
	}
}

func (k *checker) demo() {
	d := k.c.Demo
	if d == (Demo{}) {
		return
	}
	if d.Topic == "" {
		k.errorf("demo.topic", "required when demo is present: the source topic the feeder writes")
	} else {
		k.demoTopic("demo.topic", d.Topic)
	}
	for _, t := range []struct{ path, topic string }{{"demo.payments_topic", d.PaymentsTopic}, {"demo.customers_topic", d.CustomersTopic}} {
		switch {
		case t.topic == "":
		case d.Kind != "orders":
			k.errorf(t.path, "only with demo.kind orders: the other kinds write one topic")
		case t.topic == d.Topic:
			k.errorf(t.path, "must not be demo.topic (%q): orders go to a topic of their own", d.Topic)
		default:
			k.demoTopic(t.path, t.topic)
		}
	}
	switch {
	case d.LimitsTopic == "":
	case d.Kind != "" && d.Kind != "readings":
		k.errorf("demo.limits_topic", "only with demo.kind readings: the limits are the sensors'")
	case d.LimitsTopic == d.Topic:
		k.errorf("demo.limits_topic", "must not be demo.topic (%q): readings and limits go to topics of their own", d.Topic)
	default:
		k.demoTopic("demo.limits_topic", d.LimitsTopic)
	}
	if d.PaymentsTopic != "" && d.PaymentsTopic == d.CustomersTopic {
		k.errorf("demo.customers_topic", "must not be demo.payments_topic (%q)", d.PaymentsTopic)
	}
	if d.Kind == "orders" && d.TimeStep <= 0 {
		k.errorf("demo.time_step", "required with demo.kind orders: payments and customer changes are stamped on the orders' event time, which the feeder moves on a time of its own")
	}
	positive(k, "demo.rate", d.Rate)
	positive(k, "demo.records", d.Records)
	positive(k, "demo.sensors", d.Sensors)
	positive(k, "demo.partitions", d.Partitions)
	if d.Kind != "" {
		k.oneOf("demo.kind", d.Kind, []string{"readings", "clicks", "orders"})
	}
	for _, p := range []struct {
		path string
		v    int
	}{{"demo.out_of_order", d.OutOfOrder}, {"demo.late", d.Late}} {
		if p.v < 0 || p.v > 100 {
			k.errorf(p.path, "a percentage of the records, from 0 to 100; found %d", p.v)
		}
	}
	if d.OutOfOrder > 0 && d.Disorder <= 0 {
		k.errorf("demo.disorder", "required with demo.out_of_order: how far behind out-of-order records are stamped, such as 5s")
	}
}

// demoTopic checks a topic the feeder writes: a valid name that a source
// reads.
func (k *checker) demoTopic(path, t string) {
	if !k.topic(path, t) {
		return
	}
	read := false
	for _, s := range k.c.Sources {
		read = read || slices.Contains(s.Topics, t)
	}
	if !read && len(k.c.Sources) > 0 {
		k.errorf(path, "topic %q is not read by any source: the feeder writes the pipeline's input", t)
	}
}

// topic checks a Kafka topic name and reports whether it is valid.
func (k *checker) topic(path, t string) bool {
	if err := CheckTopicName(t); err != nil {
		k.errorf(path, "%v", err)
		return false
	}
	return true
}

// CheckTopicName returns what is wrong with t as a Kafka topic name, or
// nil: the rule every topic of a configuration is checked by, for the
// command line's topics too.
func CheckTopicName(t string) error {
	switch {
	case t == "":
		return errors.New("the topic name is empty")
	case t == "." || t == "..":
		return fmt.Errorf("%q is not a valid topic name", t)
	case len(t) > 249:
		return fmt.Errorf("topic name is %d characters long; Kafka allows at most 249", len(t))
	case !topicRE.MatchString(t):
		return fmt.Errorf("%q is not a valid topic name: use letters, digits, \".\", \"_\" and \"-\"", t)
	}
	return nil
}

// item returns the path of the i-th element of the list at path, or path
// itself when the file gave one string rather than a list.
func (k *checker) item(path string, i int) string {
	if p := fmt.Sprintf("%s[%d]", path, i); k.c.Line(p) > 0 {
		return p
	}
	return path
}

func (k *checker) oneOf(path, val string, allowed []string) {
	if !slices.Contains(allowed, val) {
		k.errorf(path, "must be one of %s, found %q", list(allowed), val)
	}
}

// positive checks that a number or duration is above zero.
func positive[T ~int | ~int32 | ~int64](k *checker, path string, v T) bool {
	if v > 0 {
		return true
	}
	if d, ok := any(v).(time.Duration); ok {
		k.errorf(path, "must be positive, found %s", fmtDuration(d))
	} else {
		k.errorf(path, "must be positive, found %d", v)
	}
	return false
}

// fieldError returns the problem msg at path, on the line of path or of the
// nearest enclosing key in the file, or naming the environment variable
// that set it.
func (c *Config) fieldError(path, msg string) *FieldError {
	if name, ok := c.env[path]; ok {
		return &FieldError{Path: path, Msg: msg + " (set by " + name + ")"}
	}
	return &FieldError{Path: path, Line: c.NearestLine(path), Msg: msg}
}

// NearestLine returns the line of path in the file or, for a key missing
// from it (such as steps[0].key_by.key), of the nearest enclosing key; 0
// when none is in the file.
func (c *Config) NearestLine(path string) int {
	line := 0
	for p := path; p != "" && line == 0; p = parentPath(p) {
		line = c.Line(p)
	}
	return line
}

// list formats choices for messages: "a, b or c".
func list(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// fmtDuration prints d without trailing zero units: "1m", not "1m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sourceNames(sources []Source) []string {
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.Name
	}
	return names
}
