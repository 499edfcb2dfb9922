package dev.cojoin.bench;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.KafkaSourceBuilder;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The Flink peer of the join and latency benchmarks: the DataStream interval join a Flink user
 * writes for "orders paid within the window", on a local mini-cluster in this JVM.
 *
 * <p>Both topics are read by Kafka sources (event time = the record's timestamp, watermarks
 * bounded by {@code --grace-ms} of out-of-orderness), keyed by the record key and joined with
 * {@code intervalJoin(...).between(-window, +window)}: a and b match when |ts(a) - ts(b)| <= window,
 * as in cojoin and the Kafka Streams peer. Every match becomes the order-paid record
 * ({@code {"order_id", "status": "paid", "order", "payment", "by": "flink"}}, the values embedded
 * as they are, which are JSON), produced to the output topic, keyed by the order id.
 *
 * <p>{@code --third TOPIC} (the three-topic benchmark, {@code BENCH_TOPICS=3}): orders, payments and
 * shipments joined the way Flink's DataStream API joins three streams, two chained interval joins
 * with the same bounds: orders with payments, then that result (timestamped by Flink with the
 * later of the pair, as its interval join does) keyed again and joined with shipments. Every match
 * becomes the order-shipped record ({@code {"order_id", "status": "shipped", "order", "payment",
 * "shipment", "shipped_at", "by": "flink"}}).
 *
 * <p>{@code --join temporal} (the stream-table benchmark, {@code BENCH_DATA=table}): the right topic
 * is a table of customers and the left a stream of orders keyed by customer, joined as Flink joins
 * a stream with a versioned table: the event-time temporal join of its Table API, {@code JOIN
 * customers FOR SYSTEM_TIME AS OF o.rowtime}, the customers an upsert changelog keyed by the
 * record key ({@code fromChangelogStream}, {@code ChangelogMode.upsert()}), both sides from the
 * same Kafka sources and watermarks as the interval join. Every match becomes the order-paid record
 * with the customer's row as "payment" (as cojoin's order-paid plugin writes {@code b}).
 *
 * <p>{@code --bounded true} (the join benchmark) reads each topic up to its end offsets at the
 * start, so the job ends once everything is read; then it prints one JSON line: records, matches,
 * seconds (first record read to the last match). Otherwise (the latency benchmark) it runs until
 * killed. {@code --guarantee exactly-once} checkpoints every {@code --checkpoint-ms} (default
 * 100, Kafka Streams' exactly-once commit interval) and writes in Kafka transactions committed at
 * each checkpoint; at-least-once (the default) checkpoints not at all, as Flink's defaults do.
 */
public final class FlinkJoin {
    /** One record of either topic. A POJO, so Flink serialises it without Kryo. */
    public static final class Event {
        public String key;
        public String value;
        public long ts;

        public Event() {}

        Event(String key, String value, long ts) {
            this.key = key;
            this.value = value;
            this.ts = ts;
        }
    }

    // The mini-cluster runs every operator in this JVM, with this class loader: counters in statics.
    static final AtomicLong CONSUMED = new AtomicLong(), MATCHES = new AtomicLong();
    static final AtomicLong FIRST_NANOS = new AtomicLong(0), LAST_NANOS = new AtomicLong(0);

    public static void main(String[] argv) throws Exception {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        Map<String, String> a = parse(argv);
        String bootstrap = a.getOrDefault("bootstrap", "127.0.0.1:9092");
        String left = a.get("left"), right = a.get("right"), out = a.get("output-topic");
        String third = a.get("third");
        Duration window = Duration.ofMillis(Long.parseLong(a.getOrDefault("window-ms", "0")));
        boolean temporal = "temporal".equals(a.getOrDefault("join", "interval"));
        Duration grace = Duration.ofMillis(Long.parseLong(a.getOrDefault("grace-ms", "0")));
        boolean bounded = Boolean.parseBoolean(a.getOrDefault("bounded", "false"));
        boolean exactlyOnce = "exactly-once".equals(a.getOrDefault("guarantee", "at-least-once"));
        String group = a.getOrDefault("group", "flink-join-" + ProcessHandle.current().pid());
        int parallelism = Integer.parseInt(a.getOrDefault("parallelism",
                Integer.toString(Runtime.getRuntime().availableProcessors())));

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(parallelism);
        if (exactlyOnce) {
            env.enableCheckpointing(Long.parseLong(a.getOrDefault("checkpoint-ms", "100")));
        }
        WatermarkStrategy<Event> watermarks = WatermarkStrategy.<Event>forBoundedOutOfOrderness(grace)
                .withTimestampAssigner((e, previous) -> e.ts)
                // A partition without records must not hold every watermark back.
                .withIdleness(Duration.ofSeconds(5));
        DataStream<Event> orders = env.fromSource(source(bootstrap, left, group, bounded, exactlyOnce),
                watermarks, left);
        DataStream<Event> payments = env.fromSource(source(bootstrap, right, group, bounded, exactlyOnce),
                watermarks, right);
        DataStream<String> matched = temporal
                ? enriched(env, orders, payments)
                : third == null
                ? paid(orders, payments, window)
                : shipped(orders, payments, env.fromSource(
                        source(bootstrap, third, group, bounded, exactlyOnce), watermarks, third), window);
        var sink = KafkaSink.<String>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(KafkaRecordSerializationSchema.<String>builder()
                        .setTopic(out)
                        .setKeySerializationSchema(new OrderId())
                        .setValueSerializationSchema(new SimpleStringSchema())
                        .build());
        if (exactlyOnce) {
            sink.setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE).setTransactionalIdPrefix(group)
                    // The broker's transaction.max.timeout.ms (15 min) bounds Flink's default of 1 h.
                    .setProperty("transaction.timeout.ms", "600000");
        } else {
            sink.setDeliveryGuarantee(DeliveryGuarantee.AT_LEAST_ONCE);
        }
        matched.sinkTo(sink.build());

        env.execute("cojoin-bench-flink-join");
        if (bounded) {
            long end = Math.max(LAST_NANOS.get(), FIRST_NANOS.get());
            double seconds = FIRST_NANOS.get() == 0 ? 0 : (end - FIRST_NANOS.get()) / 1e9;
            System.out.printf("{\"records\": %d, \"matches\": %d, \"seconds\": %.3f, \"parallelism\": %d}%n",
                    CONSUMED.get(), MATCHES.get(), seconds, parallelism);
            System.out.flush();
        }
    }

    /** The two-topic join: orders with their payments, the order-paid record per match. */
    static DataStream<String> paid(DataStream<Event> orders, DataStream<Event> payments, Duration window) {
        return orders.keyBy(e -> e.key)
                .intervalJoin(payments.keyBy(e -> e.key))
                .between(window.negated(), window)
                .process(new ProcessJoinFunction<Event, Event, String>() {
                    @Override
                    public void processElement(Event order, Event payment, Context ctx, Collector<String> c) {
                        MATCHES.incrementAndGet();
                        LAST_NANOS.set(System.nanoTime());
                        c.collect("{\"order_id\":\"" + order.key + "\",\"status\":\"paid\",\"order\":"
                                + order.value + ",\"payment\":" + payment.value + ",\"by\":\"flink\"}");
                    }
                });
    }

    /**
     * The stream-table join: each order with its customer's row as of the order's timestamp, Flink
     * SQL's event-time temporal join against the customers read as an upsert changelog.
     */
    static DataStream<String> enriched(StreamExecutionEnvironment env, DataStream<Event> orders,
            DataStream<Event> customers) {
        StreamTableEnvironment tables = StreamTableEnvironment.create(env);
        // Event time: the records' timestamps and the sources' watermarks, as the DataStreams have them.
        tables.createTemporaryView("orders", tables.fromDataStream(orders, Schema.newBuilder()
                .columnByMetadata("rowtime", "TIMESTAMP_LTZ(3)")
                .watermark("rowtime", "SOURCE_WATERMARK()")
                .build()));
        DataStream<Row> upserts = customers
                .map(e -> Row.ofKind(RowKind.UPDATE_AFTER, e.key, e.value))
                .returns(Types.ROW_NAMED(new String[] {"k", "v"}, Types.STRING, Types.STRING));
        tables.createTemporaryView("customers", tables.fromChangelogStream(upserts, Schema.newBuilder()
                .column("k", "STRING NOT NULL")
                .column("v", "STRING")
                .columnByMetadata("rowtime", "TIMESTAMP_LTZ(3)")
                .watermark("rowtime", "SOURCE_WATERMARK()")
                .primaryKey("k")
                .build(), ChangelogMode.upsert()));
        return tables.toDataStream(tables.sqlQuery(
                        "SELECT o.`key`, o.`value`, c.v FROM orders AS o "
                                + "JOIN customers FOR SYSTEM_TIME AS OF o.rowtime AS c ON o.`key` = c.k"))
                .map(r -> {
                    MATCHES.incrementAndGet();
                    LAST_NANOS.set(System.nanoTime());
                    return "{\"order_id\":\"" + r.getField(0) + "\",\"status\":\"paid\",\"order\":"
                            + r.getField(1) + ",\"payment\":" + r.getField(2) + ",\"by\":\"flink\"}";
                })
                .returns(Types.STRING);
    }

    /**
     * The three-topic join as two chained interval joins: orders with payments into an event whose
     * value is the pair's part of the output record and whose timestamp is the later of the two
     * (the timestamp Flink gives the joined record), then that with shipments.
     */
    static DataStream<String> shipped(DataStream<Event> orders, DataStream<Event> payments,
            DataStream<Event> shipments, Duration window) {
        DataStream<Event> paid = orders.keyBy(e -> e.key)
                .intervalJoin(payments.keyBy(e -> e.key))
                .between(window.negated(), window)
                .process(new ProcessJoinFunction<Event, Event, Event>() {
                    @Override
                    public void processElement(Event order, Event payment, Context ctx, Collector<Event> c) {
                        c.collect(new Event(order.key,
                                "\"order\":" + order.value + ",\"payment\":" + payment.value, ctx.getTimestamp()));
                    }
                });
        return paid.keyBy(e -> e.key)
                .intervalJoin(shipments.keyBy(e -> e.key))
                .between(window.negated(), window)
                .process(new ProcessJoinFunction<Event, Event, String>() {
                    @Override
                    public void processElement(Event paid, Event shipment, Context ctx, Collector<String> c) {
                        MATCHES.incrementAndGet();
                        LAST_NANOS.set(System.nanoTime());
                        c.collect("{\"order_id\":\"" + paid.key + "\",\"status\":\"shipped\"," + paid.value
                                + ",\"shipment\":" + shipment.value + ",\"shipped_at\":" + shipment.ts
                                + ",\"by\":\"flink\"}");
                    }
                });
    }

    /**
     * The output's key: the order id, the value's first field, as the other systems key theirs. A
     * class, not a lambda: the sink reads its type parameter.
     */
    static final class OrderId implements SerializationSchema<String> {
        @Override
        public byte[] serialize(String s) {
            int from = s.indexOf(':') + 2;
            return s.substring(from, s.indexOf('"', from)).getBytes(StandardCharsets.UTF_8);
        }
    }

    /** Reads `topic` from its start (to its end offsets at the start if `bounded`). */
    static KafkaSource<Event> source(String bootstrap, String topic, String group, boolean bounded,
            boolean readCommitted) {
        KafkaSourceBuilder<Event> b = KafkaSource.<Event>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setGroupId(group)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(new KafkaRecordDeserializationSchema<Event>() {
                    @Override
                    public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<Event> c) {
                        FIRST_NANOS.compareAndSet(0, System.nanoTime());
                        CONSUMED.incrementAndGet();
                        String key = r.key() == null ? "" : new String(r.key(), StandardCharsets.UTF_8);
                        String value = r.value() == null ? "null" : new String(r.value(), StandardCharsets.UTF_8);
                        c.collect(new Event(key, value, r.timestamp()));
                    }

                    @Override
                    public TypeInformation<Event> getProducedType() {
                        return TypeInformation.of(Event.class);
                    }
                });
        if (bounded) {
            b.setBounded(OffsetsInitializer.latest());
        }
        if (readCommitted) {
            b.setProperty("isolation.level", "read_committed");
        }
        return b.build();
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
        boolean windowed = !"temporal".equals(a.get("join"));
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
