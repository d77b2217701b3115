package run.pipeline.bench;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams application the pipeline's benchmark (package ./bench)
 * runs as its own process, through scripts/kstreams.sh.
 *
 * <pre>
 * KStreamsBench --bootstrap HOST:PORT --job pass|count|windowed-count|table-join --app-id ID
 *               [--in TOPIC] [--out TOPIC] [--commit-interval-ms 1000]
 *               [--cache-max-bytes 0] [--threads 1] [--state-dir DIR] [--linger-ms 50]
 * </pre>
 *
 * Exactly-once v2; keys and values are byte arrays. Input values are
 * {@code {"seq":S,"ts":T,"pad":"xx…"}}, keys {@code k<N>}.
 *
 * <ul>
 * <li>pass: in → out unchanged.
 * <li>count: count per key in the store {@code count} (changelog
 * {@code <app-id>-count-changelog}); every update the record cache lets
 * through gives {@code {"count":C,"seq":S,"ts":T}} (S and T of the last
 * input record of the key).
 * <li>windowed-count: tumbling 1 s event-time windows, no grace, store
 * {@code count} (changelog {@code <app-id>-count-changelog}), suppressed
 * until the window closes (buffer {@code suppress-store}, changelog
 * {@code <app-id>-suppress-store-changelog}); each closed window gives
 * {@code {"key":"K","window_start":S,"window_end":E,"timing":"on_time","count":C}}
 * under the original key, stamped E − 1 ms.
 * <li>table-join: the input read as a table too (toTable into the versioned
 * store {@code table}, changelog {@code <app-id>-table-changelog}, one
 * minute of history), and each record joined with the row its key had at
 * the record's time, which is the record itself: the table is updated
 * before the join sees the record. Each gives
 * {@code {"left":<record>,"right":<row>}}.
 * </ul>
 *
 * stdout carries only these lines: {@code running} (the first time the
 * client is RUNNING), {@code first-record <unix nanos>} (the first record
 * read), {@code stopped} (after a clean close on SIGTERM; exit 0). The
 * first two come in either order: a stream thread processes the tasks that
 * are ready while others still restore, before the client is RUNNING. A stream
 * thread's exception shuts the client down: {@code error <message>} on
 * stderr, exit 1. Bad arguments: usage on stderr, exit 2.
 */
public final class KStreamsBench {

    /** The name of the state store of count and windowed-count. */
    static final String STORE = "count";
    /** The name of table-join's versioned store. */
    static final String TABLE = "table";
    /** How much history table-join's store keeps. */
    static final Duration TABLE_HISTORY = Duration.ofMinutes(1);
    /** The name of windowed-count's suppression; its buffer is SUPPRESS + "-store". */
    static final String SUPPRESS = "suppress";

    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(60);

    static final int EXIT_OK = 0;
    static final int EXIT_ERROR = 1;
    static final int EXIT_USAGE = 2;

    private static final String USAGE = String.join("\n",
            "usage: KStreamsBench --bootstrap HOST:PORT --job pass|count|windowed-count|table-join --app-id ID",
            "                     [--in TOPIC] [--out TOPIC] [--commit-interval-ms N] [--cache-max-bytes N]",
            "                     [--threads N] [--state-dir DIR] [--linger-ms N]",
            "",
            "  --bootstrap HOST:PORT    Kafka bootstrap servers (required)",
            "  --job NAME               pass, count, windowed-count or table-join (required)",
            "  --app-id ID              application.id: consumer group, transactional ids and",
            "                           internal topic prefix (required)",
            "  --in TOPIC               input topic [in]",
            "  --out TOPIC              output topic [out]",
            "  --commit-interval-ms N   commit.interval.ms [1000]",
            "  --cache-max-bytes N      statestore.cache.max.bytes; 0 turns the record cache off [0]",
            "  --threads N              num.stream.threads [1]",
            "  --state-dir DIR          state.dir [a new temporary dir, removed at exit]",
            "  --linger-ms N            producer linger.ms [50]",
            "");

    /** stdout, for the protocol lines only; every line is flushed at once. */
    private static final PrintStream OUT = System.out;

    private KStreamsBench() {
    }

    // --- arguments -------------------------------------------------------------

    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String msg) {
            super(msg);
        }
    }

    enum Job {
        PASS("pass"), COUNT("count"), WINDOWED_COUNT("windowed-count"), TABLE_JOIN("table-join");

        final String arg;

        Job(String arg) {
            this.arg = arg;
        }

        static Job parse(String s) throws UsageException {
            for (Job j : values()) {
                if (j.arg.equals(s)) {
                    return j;
                }
            }
            throw new UsageException("--job " + s + ": want pass, count, windowed-count or table-join");
        }
    }

    static final class Args {
        String bootstrap;
        Job job;
        String in = "in";
        String out = "out";
        String appId;
        long commitIntervalMs = 1000;
        long cacheMaxBytes = 0;
        int threads = 1;
        String stateDir;
        long lingerMs = 50;

        static Args parse(String[] argv) throws UsageException {
            Map<String, String> m = new LinkedHashMap<>();
            for (int i = 0; i < argv.length; i++) {
                String a = argv[i];
                if (a.equals("-h") || a.equals("--help")) {
                    throw new UsageException(null);
                }
                String name;
                String value;
                int eq = a.indexOf('=');
                if (a.startsWith("--") && eq > 0) {
                    name = a.substring(2, eq);
                    value = a.substring(eq + 1);
                } else if (a.startsWith("--") && a.length() > 2) {
                    name = a.substring(2);
                    if (i + 1 >= argv.length) {
                        throw new UsageException(a + ": missing value");
                    }
                    value = argv[++i];
                } else {
                    throw new UsageException("unexpected argument: " + a);
                }
                if (m.put(name, value) != null) {
                    throw new UsageException("--" + name + " given twice");
                }
            }
            Args r = new Args();
            for (Map.Entry<String, String> e : m.entrySet()) {
                String v = e.getValue();
                switch (e.getKey()) {
                    case "bootstrap" -> r.bootstrap = nonEmpty("bootstrap", v);
                    case "job" -> r.job = Job.parse(v);
                    case "in" -> r.in = nonEmpty("in", v);
                    case "out" -> r.out = nonEmpty("out", v);
                    case "app-id" -> r.appId = nonEmpty("app-id", v);
                    case "commit-interval-ms" -> r.commitIntervalMs = number("commit-interval-ms", v, 0);
                    case "cache-max-bytes" -> r.cacheMaxBytes = number("cache-max-bytes", v, 0);
                    case "threads" -> r.threads = (int) Math.min(number("threads", v, 1), 1024);
                    case "state-dir" -> r.stateDir = nonEmpty("state-dir", v);
                    case "linger-ms" -> r.lingerMs = number("linger-ms", v, 0);
                    default -> throw new UsageException("unknown option --" + e.getKey());
                }
            }
            if (r.bootstrap == null) {
                throw new UsageException("--bootstrap is required");
            }
            if (r.job == null) {
                throw new UsageException("--job is required");
            }
            if (r.appId == null) {
                throw new UsageException("--app-id is required");
            }
            if (r.in.equals(r.out)) {
                throw new UsageException("--in and --out are the same topic: " + r.in);
            }
            return r;
        }

        private static String nonEmpty(String name, String v) throws UsageException {
            if (v.isEmpty()) {
                throw new UsageException("--" + name + ": empty value");
            }
            return v;
        }

        private static long number(String name, String v, long min) throws UsageException {
            long n;
            try {
                n = Long.parseLong(v);
            } catch (NumberFormatException e) {
                throw new UsageException("--" + name + " " + v + ": not an integer");
            }
            if (n < min) {
                throw new UsageException("--" + name + " " + v + ": must be at least " + min);
            }
            return n;
        }
    }

    // --- main ------------------------------------------------------------------

    public static void main(String[] argv) {
        Args args;
        try {
            args = Args.parse(argv);
        } catch (UsageException e) {
            if (e.getMessage() == null) {
                System.err.print(USAGE);
                System.exit(EXIT_OK);
            }
            System.err.println("kstreams-bench: " + e.getMessage());
            System.err.print(USAGE);
            System.exit(EXIT_USAGE);
            return;
        }
        System.exit(run(args));
    }

    /**
     * What the shutdown hook and the main thread share. The lock orders them:
     * once the hook has set exiting, the main thread makes nothing more (no
     * state dir, client or start) and leaves the end to the hook.
     */
    static final class Shared {
        final Object lock = new Object();
        boolean exiting; // guarded by lock
        volatile Path tempState;
        volatile KafkaStreams streams;
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final CountDownLatch failed = new CountDownLatch(1);

        /** Marks the process as ending; false if it already was. */
        boolean exit() {
            synchronized (lock) {
                if (exiting) {
                    return false;
                }
                exiting = true;
                return true;
            }
        }
    }

    static int run(Args args) {
        Shared sh = new Shared();
        // Installed first, so that a SIGTERM at any point closes what exists.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (!sh.exit()) {
                return; // the error path is exiting (System.exit runs this hook)
            }
            KafkaStreams streams = sh.streams;
            boolean clean = streams == null || close(streams);
            deleteTree(sh.tempState);
            Throwable t = sh.failure.get();
            if (t != null) {
                System.err.println("error " + message(t));
                System.err.flush();
                Runtime.getRuntime().halt(EXIT_ERROR);
            }
            if (!clean) {
                System.err.println("error close did not complete within " + CLOSE_TIMEOUT.toSeconds() + "s");
                System.err.flush();
                Runtime.getRuntime().halt(EXIT_ERROR);
            }
            line("stopped");
            System.err.flush();
            // The JVM would exit 143 after a SIGTERM; a clean stop is 0.
            Runtime.getRuntime().halt(EXIT_OK);
        }, "kstreams-bench-shutdown"));

        synchronized (sh.lock) {
            if (sh.exiting) {
                parkForever(); // the hook ends the process
            }
            String stateDir = args.stateDir;
            if (stateDir == null) {
                try {
                    sh.tempState = Files.createTempDirectory("kstreams-bench-");
                } catch (IOException e) {
                    sh.exiting = true; // the hook must not turn exit 1 into 0
                    System.err.println("error cannot create a state dir: " + e);
                    return EXIT_ERROR;
                }
                stateDir = sh.tempState.toString();
                // Its warning about a state.dir in the OS temp directory does not
                // apply to a directory made for this run and removed at exit. Set
                // before the first logger is made (SLF4J simple reads it then).
                String quiet = "org.slf4j.simpleLogger.log.org.apache.kafka.streams.processor.internals.StateDirectory";
                if (System.getProperty(quiet) == null) {
                    System.setProperty(quiet, "error");
                }
            }

            AtomicBoolean firstRecord = new AtomicBoolean();
            KafkaStreams streams;
            try {
                Properties props = config(args, stateDir);
                streams = new KafkaStreams(topology(args, props, firstRecord), props);
            } catch (RuntimeException e) {
                sh.exiting = true; // the hook must not turn exit 1 into 0
                deleteTree(sh.tempState);
                System.err.println("error " + message(e));
                return EXIT_ERROR;
            }

            AtomicBoolean running = new AtomicBoolean();
            streams.setStateListener((now, before) -> {
                if (now == KafkaStreams.State.RUNNING && running.compareAndSet(false, true)) {
                    line("running");
                }
                if (now == KafkaStreams.State.ERROR) {
                    sh.failed.countDown();
                }
            });
            streams.setUncaughtExceptionHandler(e -> {
                sh.failure.compareAndSet(null, e);
                return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            sh.streams = streams;
            try {
                streams.start();
            } catch (RuntimeException e) {
                sh.failure.compareAndSet(null, e);
                sh.failed.countDown();
            }
        }

        // Waits for an error; a SIGTERM ends the process from the hook.
        try {
            sh.failed.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (!sh.exit()) {
            parkForever(); // the hook is closing (SIGTERM); it ends the process
        }
        close(sh.streams);
        deleteTree(sh.tempState);
        Throwable t = sh.failure.get();
        System.err.println("error " + (t != null ? message(t) : "the Kafka Streams client went into state ERROR"));
        System.err.flush();
        return EXIT_ERROR;
    }

    /**
     * Closes the client within 60 s, leaving the consumer group so that its
     * members need not time out before the group can be deleted or reused
     * (Kafka Streams stays in the group on a plain close()). True if all its
     * threads stopped in time.
     */
    static boolean close(KafkaStreams streams) {
        return streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(CLOSE_TIMEOUT));
    }

    private static void parkForever() {
        while (true) {
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException ignored) {
                // keep waiting for the hook to halt the JVM
            }
        }
    }

    /** The message of t and its causes on one line. */
    static String message(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (sb.length() > 0) {
                sb.append(": ");
            }
            String m = c.getMessage();
            sb.append(m != null && !m.isEmpty() ? m : c.getClass().getName());
            if (c.getCause() == c) {
                break;
            }
        }
        return sb.toString().replace('\n', ' ').replace('\r', ' ');
    }

    /** Writes one protocol line to stdout and flushes it. */
    static void line(String s) {
        synchronized (OUT) {
            OUT.print(s);
            OUT.print('\n');
            OUT.flush();
        }
    }

    static void deleteTree(Path root) {
        if (root == null || !Files.exists(root)) {
            return;
        }
        try {
            Files.walkFileTree(root, new SimpleFileVisitor<>() {
                @Override
                public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) throws IOException {
                    Files.deleteIfExists(file);
                    return FileVisitResult.CONTINUE;
                }

                @Override
                public FileVisitResult postVisitDirectory(Path dir, IOException exc) throws IOException {
                    Files.deleteIfExists(dir);
                    return FileVisitResult.CONTINUE;
                }
            });
        } catch (IOException e) {
            System.err.println("kstreams-bench: cannot remove the state dir " + root + ": " + e);
        }
    }

    // --- configuration -----------------------------------------------------------

    static Properties config(Args a, String stateDir) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.commitIntervalMs);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, a.cacheMaxBytes);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
        // No global state here: set only to silence a WARN of every
        // StreamsConfig made, also the one each thread's partition assignor
        // makes from the main consumer's configs (hence the second entry; the
        // consumer ignores it).
        p.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG, true);
        p.put(StreamsConfig.mainConsumerPrefix(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG), true);

        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_BYTES_CONFIG), 52428800);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG), 52428800);

        p.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), "lz4");
        p.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 1048576);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), a.lingerMs);
        return p;
    }

    // --- topologies --------------------------------------------------------------

    static Topology topology(Args a, Properties props, AtomicBoolean firstRecord) {
        StreamsBuilder b = new StreamsBuilder(new TopologyConfig(new StreamsConfig(props)));
        Serde<byte[]> bytes = Serdes.ByteArray();
        KStream<byte[], byte[]> in = b.stream(a.in, Consumed.with(bytes, bytes))
                .peek((k, v) -> {
                    if (!firstRecord.getPlain() && firstRecord.compareAndSet(false, true)) {
                        line("first-record " + unixNanos());
                    }
                }, Named.as("first-record"));
        Produced<byte[], byte[]> produced = Produced.with(bytes, bytes);
        switch (a.job) {
            case PASS -> in.to(a.out, produced);
            case COUNT -> in.groupByKey()
                    .aggregate(
                            () -> Acc.ZERO,
                            (k, v, acc) -> acc.add(Json.intField(v, Json.SEQ), Json.intField(v, Json.TS)),
                            Materialized.<byte[], Acc, KeyValueStore<Bytes, byte[]>>as(STORE)
                                    .withKeySerde(bytes)
                                    .withValueSerde(new AccSerde()))
                    .toStream()
                    .mapValues(acc -> acc == null ? null : acc.json())
                    .to(a.out, produced);
            case WINDOWED_COUNT -> in.groupByKey()
                    .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofSeconds(1)))
                    .count(Materialized.<byte[], Long, WindowStore<Bytes, byte[]>>as(STORE)
                            .withKeySerde(bytes))
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName(SUPPRESS))
                    .toStream()
                    .process(WindowResult::new, Named.as("window-result"))
                    .to(a.out, produced);
            case TABLE_JOIN -> {
                // The table processor is the stream's child before the join,
                // so a record is in the table when the join looks it up.
                KTable<byte[], byte[]> table = in.toTable(Named.as(TABLE),
                        Materialized.<byte[], byte[]>as(Stores.persistentVersionedKeyValueStore(TABLE, TABLE_HISTORY))
                                .withKeySerde(bytes)
                                .withValueSerde(bytes));
                in.join(table, Json::pair, Joined.with(bytes, bytes, bytes).withName("join"))
                        .to(a.out, produced);
            }
            default -> throw new IllegalStateException("job " + a.job);
        }
        return b.build();
    }

    static long unixNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    /** count's accumulator: the count, and the seq and ts of the last record. */
    record Acc(long count, long seq, long ts) {
        static final Acc ZERO = new Acc(0, 0, 0);

        Acc add(long seq, long ts) {
            return new Acc(count + 1, seq, ts);
        }

        /** {"count":C,"seq":S,"ts":T} */
        byte[] json() {
            byte[] buf = new byte[64];
            int n = Json.put(buf, 0, Json.COUNT_OPEN);
            n = Json.putLong(buf, n, count);
            n = Json.put(buf, n, Json.SEQ_SEP);
            n = Json.putLong(buf, n, seq);
            n = Json.put(buf, n, Json.TS_SEP);
            n = Json.putLong(buf, n, ts);
            buf[n++] = '}';
            return java.util.Arrays.copyOf(buf, n);
        }
    }

    /** Acc as 3 big-endian longs (24 bytes). */
    static final class AccSerde implements Serde<Acc>, Serializer<Acc>, Deserializer<Acc> {
        @Override
        public byte[] serialize(String topic, Acc a) {
            if (a == null) {
                return null;
            }
            byte[] b = new byte[24];
            putLong(b, 0, a.count());
            putLong(b, 8, a.seq());
            putLong(b, 16, a.ts());
            return b;
        }

        @Override
        public Acc deserialize(String topic, byte[] b) {
            if (b == null) {
                return null;
            }
            if (b.length != 24) {
                throw new IllegalArgumentException("count accumulator of " + b.length + " bytes, want 24");
            }
            return new Acc(getLong(b, 0), getLong(b, 8), getLong(b, 16));
        }

        @Override
        public Serializer<Acc> serializer() {
            return this;
        }

        @Override
        public Deserializer<Acc> deserializer() {
            return this;
        }

        @Override
        public void configure(Map<String, ?> configs, boolean isKey) {
        }

        @Override
        public void close() {
        }

        private static void putLong(byte[] b, int off, long v) {
            for (int i = 7; i >= 0; i--) {
                b[off + i] = (byte) v;
                v >>>= 8;
            }
        }

        private static long getLong(byte[] b, int off) {
            long v = 0;
            for (int i = 0; i < 8; i++) {
                v = (v << 8) | (b[off + i] & 0xff);
            }
            return v;
        }
    }

    /**
     * windowed-count's output: the original key, the JSON result, stamped at
     * the window's last millisecond.
     */
    static final class WindowResult implements Processor<Windowed<byte[]>, Long, byte[], byte[]> {
        private ProcessorContext<byte[], byte[]> ctx;

        @Override
        public void init(ProcessorContext<byte[], byte[]> context) {
            ctx = context;
        }

        @Override
        public void process(Record<Windowed<byte[]>, Long> r) {
            Windowed<byte[]> wk = r.key();
            Long count = r.value();
            if (wk == null || count == null) {
                return;
            }
            long start = wk.window().start();
            long end = wk.window().end();
            byte[] key = wk.key();
            ctx.forward(new Record<>(key, Json.windowResult(key, start, end, count), end - 1, r.headers()));
        }
    }

    /** Allocation-light JSON reading and writing of the few shapes used here. */
    static final class Json {
        static final byte[] SEQ = ascii("\"seq\":");
        static final byte[] TS = ascii("\"ts\":");
        static final byte[] COUNT_OPEN = ascii("{\"count\":");
        static final byte[] SEQ_SEP = ascii(",\"seq\":");
        static final byte[] TS_SEP = ascii(",\"ts\":");
        static final byte[] KEY_OPEN = ascii("{\"key\":\"");
        static final byte[] LEFT_OPEN = ascii("{\"left\":");
        static final byte[] RIGHT_SEP = ascii(",\"right\":");
        static final byte[] START_SEP = ascii("\",\"window_start\":");
        static final byte[] END_SEP = ascii(",\"window_end\":");
        static final byte[] TIMING_COUNT_SEP = ascii(",\"timing\":\"on_time\",\"count\":");
        private static final byte[] HEX = ascii("0123456789abcdef");

        private Json() {
        }

        static byte[] ascii(String s) {
            return s.getBytes(StandardCharsets.US_ASCII);
        }

        /**
         * The integer after the first occurrence of pat (e.g. {@code "seq":})
         * in v, spaces after the colon skipped; 0 when it is missing. The
         * input's pad holds only x, so a field name cannot occur in a string.
         */
        static long intField(byte[] v, byte[] pat) {
            if (v == null) {
                return 0;
            }
            int i = indexOf(v, pat);
            if (i < 0) {
                return 0;
            }
            i += pat.length;
            while (i < v.length && v[i] == ' ') {
                i++;
            }
            boolean neg = false;
            if (i < v.length && v[i] == '-') {
                neg = true;
                i++;
            }
            long n = 0;
            while (i < v.length) {
                int d = v[i] - '0';
                if (d < 0 || d > 9) {
                    break;
                }
                n = n * 10 + d;
                i++;
            }
            return neg ? -n : n;
        }

        static int indexOf(byte[] v, byte[] pat) {
            byte first = pat[0];
            int last = v.length - pat.length;
            outer:
            for (int i = 0; i <= last; i++) {
                if (v[i] != first) {
                    continue;
                }
                for (int j = 1; j < pat.length; j++) {
                    if (v[i + j] != pat[j]) {
                        continue outer;
                    }
                }
                return i;
            }
            return -1;
        }

        static int put(byte[] dst, int off, byte[] src) {
            System.arraycopy(src, 0, dst, off, src.length);
            return off + src.length;
        }

        /** Writes v in decimal at off (dst must have 20 bytes free). */
        static int putLong(byte[] dst, int off, long v) {
            if (v == Long.MIN_VALUE) {
                return put(dst, off, ascii(Long.toString(v)));
            }
            if (v < 0) {
                dst[off++] = '-';
                v = -v;
            }
            int digits = 1;
            for (long t = v; t >= 10; t /= 10) {
                digits++;
            }
            for (int i = off + digits - 1; i >= off; i--) {
                dst[i] = (byte) ('0' + (v % 10));
                v /= 10;
            }
            return off + digits;
        }

        /** {"left":L,"right":R}: table-join's output, of two JSON values. */
        static byte[] pair(byte[] left, byte[] right) {
            byte[] buf = new byte[LEFT_OPEN.length + left.length + RIGHT_SEP.length + right.length + 1];
            int n = put(buf, 0, LEFT_OPEN);
            n = put(buf, n, left);
            n = put(buf, n, RIGHT_SEP);
            n = put(buf, n, right);
            buf[n] = '}';
            return buf;
        }

        /** {"key":"K","window_start":S,"window_end":E,"timing":"on_time","count":C} */
        static byte[] windowResult(byte[] key, long start, long end, long count) {
            // A key byte takes at most 6 bytes escaped (a control character).
            byte[] buf = new byte[128 + 6 * key.length];
            int n = put(buf, 0, KEY_OPEN);
            for (byte c : key) {
                if (c == '"' || c == '\\') {
                    buf[n++] = '\\';
                    buf[n++] = c;
                } else if (c >= 0 && c < 0x20) {
                    buf[n++] = '\\';
                    buf[n++] = 'u';
                    buf[n++] = '0';
                    buf[n++] = '0';
                    buf[n++] = HEX[c >> 4];
                    buf[n++] = HEX[c & 15];
                } else {
                    buf[n++] = c; // ASCII, or UTF-8 passed through
                }
            }
            n = put(buf, n, START_SEP);
            n = putLong(buf, n, start);
            n = put(buf, n, END_SEP);
            n = putLong(buf, n, end);
            n = put(buf, n, TIMING_COUNT_SEP);
            n = putLong(buf, n, count);
            buf[n++] = '}';
            return java.util.Arrays.copyOf(buf, n);
        }
    }
}
