package dev.cojoin.bench;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.processor.api.ContextualFixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
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
        Duration window = Duration.ofMillis(Long.parseLong(a.get("window-ms")));
        Duration grace = Duration.ofMillis(Long.parseLong(a.getOrDefault("grace-ms", "0")));
        long expect = Long.parseLong(a.getOrDefault("expect", "0"));
        long expectMatches = Long.parseLong(a.getOrDefault("expect-matches", "0"));
        double idleSecs = Double.parseDouble(a.getOrDefault("idle-secs", "10"));
        boolean memory = "memory".equals(a.getOrDefault("store", "rocksdb"));
        boolean exactlyOnce = "exactly-once".equals(a.getOrDefault("guarantee", "at-least-once"));
        boolean forever = Boolean.parseBoolean(a.getOrDefault("forever", "false"));
        String threads = a.getOrDefault("threads", Integer.toString(Runtime.getRuntime().availableProcessors()));

        AtomicLong consumed = new AtomicLong(), matches = new AtomicLong();
        AtomicLong firstNanos = new AtomicLong(0), lastNanos = new AtomicLong(0);
        StreamsBuilder builder = new StreamsBuilder();
        Consumed<String, String> strings = Consumed.with(Serdes.String(), Serdes.String());
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
        streams.start();
        if (forever) {
            Thread.sleep(Long.MAX_VALUE);
        }

        long lastProgress = System.nanoTime();
        long seen = -1;
        while (true) {
            Thread.sleep(20);
            long c = consumed.get(), m = matches.get();
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
        System.out.printf("{\"records\": %d, \"matches\": %d, \"seconds\": %.3f, \"store\": \"%s\", \"threads\": %s}%n",
                consumed.get(), matches.get(), seconds, memory ? "memory" : "rocksdb", threads);
        System.out.flush();
        streams.close(Duration.ofSeconds(30));
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
        for (String required : new String[] {"left", "right", "window-ms", "output-topic"}) {
            if (!a.containsKey(required)) {
                throw new IllegalArgumentException("missing --" + required);
            }
        }
        return a;
    }
}
