#!/usr/bin/env bash
# A single-node Apache Kafka broker in KRaft mode (one process, broker and controller), in the
# foreground, for the tests, the benchmarks and the README walk-through:
#
#   tests/kafka/broker.sh <log-dir> <port> [<controller-port>]
#   KAFKA_SECURITY=secured tests/kafka/broker.sh <log-dir> <port> [<controller-port> [<ssl-port>]]
#
# <log-dir> is wiped and formatted afresh; clients connect to 127.0.0.1:<port>. The jars come from
# `make kafka-libs` (tests/kafka/pom.xml, Kafka 4.4.0). Settings are for one machine's tests:
# replication factor 1 for internal topics, no initial rebalance delay, topics only when created,
# no retention limit, a capped heap (KAFKA_HEAP, default 512m). Extra `key=value` settings:
# KAFKA_SETTINGS, one per line. `make kafka` runs it in the background for the README.
#
# Secured (KAFKA_SECURITY=secured; tests/broker.rs `Kafka::start_secured`): no plaintext listener.
#   - 127.0.0.1:<port>            SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER (unsecured
#                                 JWTs, Kafka's default validator: the token's `sub` is the user, so
#                                 anyone may claim any user this way; tests only)
#   - 127.0.0.1:<ssl-port>        SSL with client certificates required (mTLS); CN=x is User:x
#                                 (default <port>+2)
#   - 127.0.0.1:<controller-port> the controller, SSL with client certificates required
# Everything is made afresh at each start, in <log-dir>:
#   tls/ca.pem                    the test CA (clients' `ssl.ca.location`)
#   tls/{cojoin,admin}.{pem,key}  client certificates (CN=cojoin, CN=admin) signed by it, and keys
#   tls/broker-keystore.pem       the broker's key and certificate (CN=broker, 127.0.0.1, localhost)
#   users/{admin,cojoin}.password `<user>-secret-<random hex>`, for SCRAM (both) and PLAIN
# The StandardAuthorizer denies what no ACL allows; the super users are User:admin (the tests'
# administrator) and User:broker: the broker's own connections, to its controller and between
# brokers (inter.broker.listener.name=SSL), present the broker certificate, so they need no
# password and no SCRAM credential, and they must pass the authorizer before any ACL is loaded.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
libs="${KAFKA_LIBS:-$here/target/kafka-libs}"
dir="${1:?usage: broker.sh <log-dir> <port> [<controller-port>]}"
port="${2:?usage: broker.sh <log-dir> <port> [<controller-port>]}"
cport="${3:-$((port + 1))}"
security="${KAFKA_SECURITY:-plaintext}"
ports=("$port" "$cport")
case "$security" in
  plaintext) ;;
  secured) sslport="${4:-$((port + 2))}"; ports+=("$sslport");;
  *) echo "kafka broker: KAFKA_SECURITY is plaintext or secured, not ${security@Q}" >&2; exit 1;;
esac

fail() { echo "kafka broker: $*" >&2; exit 1; }
[ -f "$libs/kafka_2.13-4.4.0.jar" ] || fail "no Kafka jars in $libs: run \`make kafka-libs\` (mvn, once)"
java_version="$(java -version 2>&1 | head -1)" || fail "no java on PATH: Kafka 4.4 needs Java 17 or newer"
case "$java_version" in
  *\"1.*|*\"9*|*\"10*|*\"11*|*\"12*|*\"13*|*\"14*|*\"15*|*\"16*)
    fail "Kafka 4.4 needs Java 17 or newer, found: $java_version (set JAVA_HOME or PATH)";;
esac
for p in "${ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    fail "port $p on 127.0.0.1 is taken (another broker?): pick another port"
  fi
done

# The broker itself, on the properties and data in <log-dir>.
run_broker() {
  exec java -Xms128m -Xmx"${KAFKA_HEAP:-512m}" -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$here/log4j2.properties" -cp "$libs/*" kafka.Kafka "$dir/server.properties"
}
# KAFKA_RESTART=1: the broker made earlier in <log-dir> starts again with its data, its listeners
# and its key material (a test's broker restart: tests/broker.rs `Kafka::restart`).
if [ "${KAFKA_RESTART:-}" = 1 ]; then
  [ -f "$dir/server.properties" ] || fail "KAFKA_RESTART=1 but $dir holds no broker to start again"
  run_broker
fi

rm -rf "$dir"
mkdir -p "$dir/data"

# The listeners, and for a secured broker its key material, users and authorizer.
format_args=()
if [ "$security" = plaintext ]; then
  listener_settings="listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT"
else
  command -v openssl > /dev/null || fail "no openssl on PATH: the secured broker makes its certificates with it"
  tls="$dir/tls" users="$dir/users"
  mkdir -p "$tls" "$users"
  tool() { openssl "$@" 2>> "$tls/openssl.log" || fail "openssl $1 failed: see $tls/openssl.log"; }
  # EC P-256 keys: generated in milliseconds (RSA would cost seconds on a busy machine), PKCS#8
  # unencrypted, which both Java's PEM key store and librdkafka read.
  newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  tool req -x509 "${newkey[@]}" -keyout "$tls/ca.key" -out "$tls/ca.pem" -days 7 -subj /CN=cojoin-test-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
  # issue <name> <extensions>: tls/<name>.key and tls/<name>.pem, CN=<name>, signed by the CA.
  issue() {
    tool req -new "${newkey[@]}" -keyout "$tls/$1.key" -out "$tls/$1.csr" -subj "/CN=$1"
    tool x509 -req -in "$tls/$1.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -days 7 \
      -set_serial "0x$(openssl rand -hex 8)" -out "$tls/$1.pem" -extfile <(printf '%s\n' "${@:2}")
    rm "$tls/$1.csr"
  }
  # Clients check the broker's name (librdkafka's ssl.endpoint.identification.algorithm=https), so
  # its certificate names both ways of writing the loopback address.
  issue broker "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth,clientAuth"
  issue cojoin "extendedKeyUsage=clientAuth"
  issue admin "extendedKeyUsage=clientAuth"
  cat "$tls/broker.key" "$tls/broker.pem" "$tls/ca.pem" > "$tls/broker-keystore.pem"
  # A fresh password per start: a test can search logs and outputs for it.
  # Written whole, then renamed: tests/broker.rs reads them as soon as they exist.
  for user in admin cojoin; do
    printf '%s' "$user-secret-$(openssl rand -hex 8)" > "$users/$user.password.new"
    mv "$users/$user.password.new" "$users/$user.password"
  done
  admin_password="$(cat "$users/admin.password")" cojoin_password="$(cat "$users/cojoin.password")"
  # SCRAM credentials live in the cluster metadata, so they are written when the log is formatted.
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do
    format_args+=(--add-scram "$mechanism=[name=admin,password=$admin_password]")
    format_args+=(--add-scram "$mechanism=[name=cojoin,password=$cojoin_password]")
  done
  listener_settings="listeners=SASL_SSL://127.0.0.1:$port,SSL://127.0.0.1:$sslport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_SSL://127.0.0.1:$port,SSL://127.0.0.1:$sslport
listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL
inter.broker.listener.name=SSL
# One key store (the broker's certificate) for every listener, and for the broker's own client side
# of its controller and inter-broker connections.
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
# mTLS where there is no SASL; on SASL_SSL a client certificate is neither needed nor asked for.
listener.name.ssl.ssl.client.auth=required
listener.name.controller.ssl.client.auth=required
# A certificate's principal is its CN (\"CN=cojoin\" is User:cojoin), not the whole DN.
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin=\"$admin_password\" user_cojoin=\"$cojoin_password\";
# No validator configured: Kafka's default accepts unsigned JWTs (alg none), user = the \`sub\` claim.
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"broker\";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:broker"
fi

cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
controller.listener.names=CONTROLLER
$listener_settings
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
  "${format_args[@]}" > "$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; fail "formatting $dir failed"; }
run_broker
