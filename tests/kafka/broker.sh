#!/usr/bin/env bash
# A single-node Apache Kafka broker in KRaft mode (one process, broker and controller), in the
# foreground, for the tests, the benchmarks and the README walk-through:
#
#   tests/kafka/broker.sh <log-dir> <port> [<controller-port>]
#
# <log-dir> is wiped and formatted afresh; clients connect to 127.0.0.1:<port>. The jars come from
# `make kafka-libs` (tests/kafka/pom.xml, Kafka 4.4.0). Settings are for one machine's tests:
# replication factor 1 for internal topics, no initial rebalance delay, topics only when created,
# no retention limit, a capped heap (KAFKA_HEAP, default 512m). Extra `key=value` settings:
# KAFKA_SETTINGS, one per line. `make kafka` runs it in the background for the README.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
libs="${KAFKA_LIBS:-$here/target/kafka-libs}"
dir="${1:?usage: broker.sh <log-dir> <port> [<controller-port>]}"
port="${2:?usage: broker.sh <log-dir> <port> [<controller-port>]}"
cport="${3:-$((port + 1))}"

fail() { echo "kafka broker: $*" >&2; exit 1; }
[ -f "$libs/kafka_2.13-4.4.0.jar" ] || fail "no Kafka jars in $libs: run \`make kafka-libs\` (mvn, once)"
java_version="$(java -version 2>&1 | head -1)" || fail "no java on PATH: Kafka 4.4 needs Java 17 or newer"
case "$java_version" in
  *\"1.*|*\"9*|*\"10*|*\"11*|*\"12*|*\"13*|*\"14*|*\"15*|*\"16*)
    fail "Kafka 4.4 needs Java 17 or newer, found: $java_version (set JAVA_HOME or PATH)";;
esac
for p in "$port" "$cport"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    fail "port $p on 127.0.0.1 is taken (another broker?): pick another port"
  fi
done

rm -rf "$dir"
mkdir -p "$dir/data"
cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
# Keep every record: the tests and benchmarks stamp records days or years in the past, which the
# default 7-day retention would delete at its first check (after 5 minutes).
log.retention.ms=-1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=6
# A killed exactly-once host leaves a transaction open; check for timed-out ones every second (the
# default, 10 s, would hold read_committed readers that much longer in the tests).
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.consumer.session.timeout.ms=10000
group.consumer.min.session.timeout.ms=1000
group.consumer.heartbeat.interval.ms=500
group.consumer.min.heartbeat.interval.ms=100
${KAFKA_SETTINGS:-}
PROPS

cp=("-cp" "$libs/*")
cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
# --cluster-id=…: an id may start with "-", which the option parser would take for an option.
java "${cp[@]}" kafka.tools.StorageTool format --cluster-id="$cluster_id" --config "$dir/server.properties" \
  > "$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; fail "formatting $dir failed"; }
exec java -Xms128m -Xmx"${KAFKA_HEAP:-512m}" -XX:+UseG1GC -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="$here/log4j2.properties" "${cp[@]}" kafka.Kafka "$dir/server.properties"
