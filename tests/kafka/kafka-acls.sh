#!/usr/bin/env bash
# Apache Kafka's own kafka-acls.sh (org.apache.kafka.tools.AclCommand), run from the jars of
# `make kafka-libs`: `tests/kafka/kafka-acls.sh --bootstrap-server … --command-config … --add …`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
libs="${KAFKA_LIBS:-$here/target/kafka-libs}"
[ -f "$libs/kafka-tools-4.4.0.jar" ] || { echo "no Kafka tools in $libs: run \`make kafka-libs\`" >&2; exit 1; }
exec java -Xmx256m -Dlog4j2.configurationFile="$here/log4j2.properties" -cp "$libs/*" \
  org.apache.kafka.tools.AclCommand "$@"
