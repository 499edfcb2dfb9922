package dev.cojoin.bench;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.processor.api.ContextualFixedKeyProcessor;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The join benchmark's Kafka Streams peer: the KStream-KStream inner join cojoin's benchmark runs,
 * the way a Kafka Streams user writes it.
 *
 * <p>Both topics are read as {@code KStream<String, String>} and joined with
 * {@code JoinWindows.ofTimeDifferenceAndGrace(window, grace)}: a and b match when
 * |ts(a) - ts(b)| <= window, as in cojoin. Every match becomes the order-paid record of the
 * example plugins ({@code {"order_id", "status": "paid", "order", "payment", "by"}}, the values
 * embedded as they are, which are JSON) and is produced to the output topic. The window stores
 * are Kafka Streams' default (RocksDB, with changelog topics) or, with {@code --store memory},
 * in-memory window stores (still with changelogs).
 *
 * <p>{@code --third TOPIC} (the three-topic benchmark, {@code BENCH_TOPICS=3}): orders, payments and
 * shipments joined the way Kafka Streams joins three streams, two chained {@code KStream#join}s with
 * the same windows: orders with payments, then that result (which carries the later of the two
 * timestamps) with shipments. The keys are the same throughout, so the chain needs no repartition
 * topic: one task per partition number holds all three topics and both joins' window stores. Every
 * match becomes the order-shipped record of the example plugins ({@code {"order_id", "status":
 * "shipped", "order", "payment", "shipment", "shipped_at", "by"}}); {@code shipped_at} is the
 * shipment's record timestamp, which a value joiner does not see, so a {@code processValues} step
 * puts it beside the shipment's value first.
 *
 * <p>{@code --join table} and {@code --join global-table} (the stream-table benchmark,
 * {@code BENCH_DATA=table}, issue 33): the right topic is a table of customers and the left a
 * stream of orders keyed by customer, joined as a Kafka Streams user joins them:
 * {@code builder.table(right)} and {@code stream.join(table, joiner)} (the KStream-KTable join:
 * co-partitioned, the table a source of each task, processed in timestamp order with the stream),
 * or {@code builder.globalTable(right)} and {@code stream.join(globalTable, keySelector, joiner)}
 * (every instance reads the whole table, restored from its topic before any stream record).
 * The table's store is RocksDB (Kafka Streams' default), in memory ({@code --store memory}), or,
 * for the KTable, a versioned RocksDB store with an hour of history ({@code --store versioned}:
 * the row as of the stream record's timestamp, as cojoin's {@code mode = "versioned"}). Every
 * match becomes the order-paid record with the customer's row as "payment" (as cojoin's
 * order-paid plugin writes {@code b}). The table's records are counted as they are consumed (a
 * counting timestamp extractor on the table's source) and, for the global table, as they are
 * restored (a state restore listener). {@code --restore true}: the restart of a finished run
 * (the same {@code --app-id}, a fresh state directory): the table's store restored from its
 * changelog (the KTable) or its topic (the global table), timed from the JVM's start until the
 * instance is RUNNING ("seconds") and by the restore listener ("restore_seconds"); it prints {@code {"restored", "seconds",
 * "restore_seconds"}} and ends.
 *
 * <p>{@code --guarantee exactly-once} sets {@code processing.guarantee = exactly_once_v2} (its
 * commit interval then defaults to 100 ms); at-least-once, the default, is Kafka Streams' default.
 * {@code --forever true} (the latency benchmark) runs until killed. Otherwise it stops once it
 * has consumed {@code --expect} records and made {@code --expect-matches}
 * matches (or after {@code --idle-secs} without progress), and prints one JSON line: records,
 * matches, seconds (first record consumed to the last match).
 */
public final class KafkaStreamsJoin {
    public static void main(String[] argv) throws Exception {
        // Before any Kafka class logs: slf4j-simple's default, INFO, floods stderr at every start.
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        Map<String, String> a = parse(argv);
        String bootstrap = a.getOrDefault("bootstrap", "127.0.0.1:9092");
        String left = a.get("left"), right = a.get("right"), out = a.get("output-topic");
        String third = a.get("third");
        Duration window = Duration.ofMillis(Long.parseLong(a.getOrDefault("window-ms", "0")));
        Duration grace = Duration.ofMillis(Long.parseLong(a.getOrDefault("grace-ms", "0")));
        long expect = Long.parseLong(a.getOrDefault("expect", "0"));
        long expectMatches = Long.parseLong(a.getOrDefault("expect-matches", "0"));
        double idleSecs = Double.parseDouble(a.getOrDefault("idle-secs", "10"));
        boolean memory = "memory".equals(a.getOrDefault("store", "rocksdb"));
        boolean exactlyOnce = "exactly-once".equals(a.getOrDefault("guarantee", "at-least-once"));
        boolean forever = Boolean.parseBoolean(a.getOrDefault("forever", "false"));
        String threads = a.getOrDefault("threads", Integer.toString(Runtime.getRuntime().availableProcessors()));
        String join = a.getOrDefault("join", "stream");
        String store = a.getOrDefault("store", "rocksdb");
        boolean restoreOnly = Boolean.parseBoolean(a.getOrDefault("restore", "false"));

        AtomicLong consumed = new AtomicLong(), matches = new AtomicLong();
        AtomicLong firstNanos = new AtomicLong(0), lastNanos = new AtomicLong(0);
        StreamsBuilder builder = new StreamsBuilder();
        Consumed<String, String> strings = Consumed.with(Serdes.String(), Serdes.String());
        // Restored records of the table (either kind), and the nanos of the first restore's start
        // and of the last one's end.
        AtomicLong restored = new AtomicLong(), restoreStart = new AtomicLong(0), restoreEnd = new AtomicLong(0);
        if (!join.equals("stream")) {
            buildTableJoin(builder, join, store, left, right, out, consumed, matches, firstNanos, lastNanos);
        } else {
        KStream<String, String> orders = builder.stream(left, strings).peek((k, v) -> {
            firstNanos.compareAndSet(0, System.nanoTime());
            consumed.incrementAndGet();
        });
        KStream<String, String> payments = builder.stream(right, strings).peek((k, v) -> {
            firstNanos.compareAndSet(0, System.nanoTime());
            consumed.incrementAndGet();
        });
        JoinWindows windows = JoinWindows.ofTimeDifferenceAndGrace(window, grace);
        StreamJoined<String, String, String> joined =
                StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String());
        if (memory) {
            // A window store must keep window + grace of each side, with the join's window size.
            Duration retention = window.plus(window).plus(grace);
            joined = joined
                    .withThisStoreSupplier(Stores.inMemoryWindowStore(
                            "join-this", retention, window.multipliedBy(2), true))
                    .withOtherStoreSupplier(Stores.inMemoryWindowStore(
                            "join-other", retention, window.multipliedBy(2), true));
        }
        if (third == null) {
            orders.join(payments, (key, order, payment) -> {
                        matches.incrementAndGet();
                        lastNanos.set(System.nanoTime());
                        return "{\"order_id\":\"" + key + "\",\"status\":\"paid\",\"order\":" + order
                                + ",\"payment\":" + payment + ",\"by\":\"kafka-streams\"}";
                    }, windows, joined)
                    .to(out, Produced.with(Serdes.String(), Serdes.String()));
        } else {
            // The shipment's value with its timestamp, as the tail of the output record.
            KStream<String, String> shipments = builder.stream(third, strings).peek((k, v) -> {
                firstNanos.compareAndSet(0, System.nanoTime());
                consumed.incrementAndGet();
            }).processValues(() -> new ContextualFixedKeyProcessor<String, String, String>() {
                @Override
                public void process(FixedKeyRecord<String, String> r) {
                    context().forward(r.withValue(
                            ",\"shipment\":" + r.value() + ",\"shipped_at\":" + r.timestamp()));
                }
            });
            StreamJoined<String, String, String> joined2 =
                    StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String());
            if (memory) {
                Duration retention = window.plus(window).plus(grace);
                joined2 = joined2
                        .withThisStoreSupplier(Stores.inMemoryWindowStore(
                                "join2-this", retention, window.multipliedBy(2), true))
                        .withOtherStoreSupplier(Stores.inMemoryWindowStore(
                                "join2-other", retention, window.multipliedBy(2), true));
            }
            orders.join(payments, (order, payment) -> "\"order\":" + order + ",\"payment\":" + payment,
                            windows, joined)
                    .join(shipments, (key, paid, shipment) -> {
                        matches.incrementAndGet();
                        lastNanos.set(System.nanoTime());
                        return "{\"order_id\":\"" + key + "\",\"status\":\"shipped\"," + paid + shipment
                                + ",\"by\":\"kafka-streams\"}";
                    }, windows, joined2)
                    .to(out, Produced.with(Serdes.String(), Serdes.String()));
        }
        }

        Path stateDir = Files.createTempDirectory("kafka-streams-join");
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG,
                a.getOrDefault("app-id", "kafka-streams-join-" + ProcessHandle.current().pid()));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (exactlyOnce) {
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        // Despite its name, told of every store's restore, the tasks' and the global ones.
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                restoreStart.compareAndSet(0, System.nanoTime());
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
                restored.addAndGet(n);
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                restoreEnd.set(System.nanoTime());
            }
        });
        long startNanos = System.nanoTime();
        streams.start();
        if (restoreOnly) {
            // Until every task is RUNNING, i.e. its stores restored (the global table's before any).
            while (streams.state() != KafkaStreams.State.RUNNING
                    && streams.state() != KafkaStreams.State.ERROR
                    && (System.nanoTime() - startNanos) / 1e9 < 600) {
                Thread.sleep(5);
            }
            // From the JVM's start, as the benchmark times cojoin's restart from its process's.
            double seconds = ManagementFactory.getRuntimeMXBean().getUptime() / 1e3;
            double restoreSeconds = restoreStart.get() == 0 ? 0 : (restoreEnd.get() - restoreStart.get()) / 1e9;
            System.out.printf("{\"restored\": %d, \"seconds\": %.3f, \"restore_seconds\": %.3f, \"state\": \"%s\"}%n",
                    restored.get(), seconds, restoreSeconds, streams.state());
            System.out.flush();
            streams.close(Duration.ofSeconds(30));
            return;
        }
        if (forever) {
            Thread.sleep(Long.MAX_VALUE);
        }

        long lastProgress = System.nanoTime();
        long seen = -1;
        while (true) {
            Thread.sleep(20);
            // A global table's records are restored before the stream threads start, not consumed.
            if (join.equals("global-table") && restoreStart.get() != 0) {
                firstNanos.compareAndSet(0, restoreStart.get());
            }
            long c = consumed.get() + restored.get(), m = matches.get();
            if (c + m != seen) {
                seen = c + m;
                lastProgress = System.nanoTime();
            }
            boolean done = c >= expect && m >= expectMatches;
            // Before the first record, allow for the group join and the state stores' set-up.
            double allowed = firstNanos.get() == 0 ? Math.max(idleSecs, 120) : idleSecs;
            boolean idle = (System.nanoTime() - lastProgress) / 1e9 > allowed;
            if (done || idle || streams.state() == KafkaStreams.State.ERROR) {
                break;
            }
        }
        long end = Math.max(lastNanos.get(), firstNanos.get());
        double seconds = firstNanos.get() == 0 ? 0 : (end - firstNanos.get()) / 1e9;
        System.out.printf("{\"records\": %d, \"matches\": %d, \"seconds\": %.3f, \"store\": \"%s\", \"join\": \"%s\", \"threads\": %s}%n",
                consumed.get() + restored.get(), matches.get(), seconds, store, join, threads);
        System.out.flush();
        if (join.equals("stream")) {
            streams.close(Duration.ofSeconds(30));
        } else {
            // Leaving the group, so that the restart which times the table's restore (same
            // application id) is not kept waiting for this member's session to time out.
            streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(Duration.ofSeconds(30)));
        }
    }

    /**
     * The stream-table join: {@code left} the stream of orders, {@code right} the table of
     * customers, as a KTable ({@code join = "table"}) or a GlobalKTable ({@code "global-table"}).
     */
    private static void buildTableJoin(StreamsBuilder builder, String join, String store, String left, String right,
            String out, AtomicLong consumed, AtomicLong matches, AtomicLong firstNanos, AtomicLong lastNanos) {
        // Counts the table's records as its task (or the global thread, past its restore) takes
        // them in; a table has no peek. Returns the record's own timestamp, as the default does.
        TimestampExtractor counting = (ConsumerRecord<Object, Object> r, long partitionTime) -> {
            firstNanos.compareAndSet(0, System.nanoTime());
            consumed.incrementAndGet();
            return r.timestamp();
        };
        Consumed<String, String> tableSource =
                Consumed.with(Serdes.String(), Serdes.String()).withTimestampExtractor(counting);
        String name = "customers-table";
        KStream<String, String> orders = builder.stream(left, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> {
                    firstNanos.compareAndSet(0, System.nanoTime());
                    consumed.incrementAndGet();
                });
        KStream<String, String> paid;
        if (join.equals("table")) {
            KTable<String, String> customers = switch (store) {
                case "memory" -> builder.table(right, tableSource, materialized(Stores.inMemoryKeyValueStore(name)));
                case "versioned" -> builder.table(right, tableSource, Materialized
                        .<String, String>as(Stores.persistentVersionedKeyValueStore(name, Duration.ofHours(1)))
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
                case "rocksdb" -> builder.table(right, tableSource);
                default -> throw new IllegalArgumentException("--store " + store + ": rocksdb, memory or versioned");
            };
            paid = orders.join(customers, (key, order, customer) -> paidRecord(key, order, customer, matches, lastNanos));
        } else if (join.equals("global-table")) {
            GlobalKTable<String, String> customers = switch (store) {
                case "memory" -> builder.globalTable(right, tableSource, materialized(Stores.inMemoryKeyValueStore(name)));
                case "rocksdb" -> builder.globalTable(right, tableSource);
                default -> throw new IllegalArgumentException("--store " + store + " with a global table: rocksdb or memory");
            };
            paid = orders.join(customers, (key, order) -> key,
                    (key, order, customer) -> paidRecord(key, order, customer, matches, lastNanos));
        } else {
            throw new IllegalArgumentException("--join " + join + ": stream, table or global-table");
        }
        paid.to(out, Produced.with(Serdes.String(), Serdes.String()));
    }

    private static Materialized<String, String, KeyValueStore<Bytes, byte[]>> materialized(KeyValueBytesStoreSupplier supplier) {
        return Materialized.<String, String>as(supplier).withKeySerde(Serdes.String()).withValueSerde(Serdes.String());
    }

    /** The order-paid record, the customer's row as its "payment" (cojoin's plugin writes b there). */
    private static String paidRecord(String key, String order, String customer, AtomicLong matches, AtomicLong lastNanos) {
        matches.incrementAndGet();
        lastNanos.set(System.nanoTime());
        return "{\"order_id\":\"" + key + "\",\"status\":\"paid\",\"order\":" + order
                + ",\"payment\":" + customer + ",\"by\":\"kafka-streams\"}";
    }

    /** {@code --name value} pairs. */
    private static Map<String, String> parse(String[] argv) {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            a.put(argv[i].substring(2), argv[i + 1]);
        }
        boolean windowed = a.getOrDefault("join", "stream").equals("stream");
        for (String required : windowed
                ? new String[] {"left", "right", "window-ms", "output-topic"}
                : new String[] {"left", "right", "output-topic"}) {
            if (!a.containsKey(required)) {
                throw new IllegalArgumentException("missing --" + required);
            }
        }
        return a;
    }
}
