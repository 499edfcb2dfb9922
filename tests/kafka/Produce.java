// Records produced by Apache Kafka's own Java producer (not librdkafka), for the tests that join
// what another client wrote, e.g. with a codec chosen on the command line. Java 17's single-file
// source launcher runs it from the jars of `make kafka-libs`, with no build step:
//
//   java -cp 'tests/kafka/target/kafka-libs/*' tests/kafka/Produce.java <bootstrap> <compression.type> [key=value ...]
//
// <compression.type> is none, gzip, snappy, lz4 or zstd; each further key=value is a producer
// setting. stdin holds one record per line, tab-separated:
//
//   topic <TAB> partition <TAB> timestamp <TAB> key <TAB> value
//
// partition -1 leaves the choice to the Java default partitioner (murmur2 of the key, as
// librdkafka's `murmur2_random`); timestamp is the record's create time in ms; the value is the
// rest of the line (it may hold tabs). A line of the first four fields alone (no tab after the
// key) is a tombstone: a record with a null value. An empty line flushes: everything above it is
// acknowledged before anything below it is sent. Everything is flushed at the end; a record the
// broker refuses stops the producer with exit code 1 and the reason. Prints "produced <n>
// records" to stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class Produce {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: Produce.java <bootstrap> <compression.type> [key=value ...] < records");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args[1]);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        // A few ms of batching: a codec compresses a batch, and one-record batches would test little.
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq < 1) {
                System.err.println("not a key=value setting: " + args[i]);
                System.exit(2);
            }
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        AtomicReference<Exception> failed = new AtomicReference<>();
        long sent = 0;
        int lineNo = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null && failed.get() == null) {
                lineNo++;
                if (line.isEmpty()) {
                    producer.flush();
                    continue;
                }
                String[] f = line.split("\t", 5);
                if (f.length != 5 && f.length != 4) {
                    System.err.println("line " + lineNo + ": want topic, partition, timestamp, key, value separated by tabs (no value: a tombstone): " + line);
                    System.exit(2);
                }
                int partition = Integer.parseInt(f[1]);
                ProducerRecord<String, String> record = new ProducerRecord<>(
                    f[0], partition < 0 ? null : partition, Long.parseLong(f[2]), f[3], f.length == 5 ? f[4] : null);
                producer.send(record, (metadata, e) -> {
                    if (e != null) {
                        failed.compareAndSet(null, e);
                    }
                });
                sent++;
            }
            producer.flush();
        }
        if (failed.get() != null) {
            System.err.println("producing failed: " + failed.get());
            System.exit(1);
        }
        System.err.println("produced " + sent + " records");
    }
}
