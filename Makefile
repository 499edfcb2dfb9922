# cojoin build entry point. Every target installs what it needs, once, and skips what is there.
#   make demo    build the host and the example plugins, run the join on an embedded broker
#   make test    everything CI runs: plugins in three languages, then the test suite
#   make bench   plugin call (criterion) and load benchmarks
#   make bench-matcher  the join core alone (criterion), and heap bytes per held event
#   make bench-join  the join on Apache Kafka against the bare consumer, Kafka Streams and the Python
#                peers (a table, ratios, a chart); make bench-join-3 (= BENCH_TOPICS=3 make bench-join)
#                the three-topic join against two chained joins in Kafka Streams and Flink;
#                make bench-join-table (= BENCH_DATA=table make bench-join) a stream joined with a
#                table against Kafka Streams' KTable and GlobalKTable joins and Quix's join_asof
#   make bench-edit  edit-to-live for a Python plugin: save app.py -> build -> deploy -> serving
#   make bench-latency  end-to-end latency p50/p99 of cojoin, Kafka Streams and Flink, at-least-once
#                and exactly-once
#   make plugins build every plugin component into build/plugins/
#   make wheel   a wheel carrying the cojoin binary, in build/wheels/ (pip install it for a `cojoin`)
#   make kafka   start a single-node Apache Kafka broker on 127.0.0.1:9092 (the README walk-through);
#                make kafka-stop stops it
#   make kafka-secured  the same broker secured (SASL_SSL and ACLs) on 127.0.0.1:9093, with an admin
#                client config in target/kafka-secured/admin.properties; make kafka-secured-stop stops it
#   make soak    the checks at scale that stay out of CI: repeated kill -9 rounds, a one-minute
#                rebalance storm per group protocol, five kill -9 rounds under exactly-once, and
#                make soak-memory: peak RSS under a 1M and a 5M backlog, and a join whose window
#                holds ~5 GB with memory.state_bytes = 256 MiB against all in RAM

SHELL := /bin/bash
CARGO ?= cargo
PY ?= python3
OUT := build/plugins
VENV := .venv
COMPONENTIZE_PY := $(VENV)/bin/componentize-py
COMPONENTIZE_JS := plugins/js/node_modules/.bin/componentize-js
RUST_PLUGINS := order_paid order_shipped noop misbehave not_a_plugin
RUST_WASM := $(foreach p,$(RUST_PLUGINS),$(OUT)/$(p).wasm)
HOST := target/release/cojoin
# Apache Kafka 4.4.0 and its run-time jars, fetched by Maven once (tests/kafka/pom.xml).
KAFKA_LIBS := tests/kafka/target/kafka-libs
KAFKA_PORT ?= 9092

.PHONY: all demo test bench bench-matcher bench-join bench-join-3 bench-join-table bench-edit bench-latency plugins setup wasm-target host rust-plugins kafka kafka-stop kafka-libs soak soak-memory wheel
all: plugins host

# --- toolchains ---------------------------------------------------------------------------------
wasm-target:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

$(COMPONENTIZE_PY): plugins/python/requirements.txt
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r plugins/python/requirements.txt
	@touch $@

$(COMPONENTIZE_JS): plugins/js/package.json plugins/js/package-lock.json
	cd plugins/js && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The Python peers of the join benchmark (confluent-kafka, Quix Streams), in their own venv.
VENV_BENCH := .venv-bench
$(VENV_BENCH)/.installed: host/benches/peers/requirements.txt
	@test -x $(VENV_BENCH)/bin/python || $(PY) -m venv $(VENV_BENCH)
	$(VENV_BENCH)/bin/pip install --quiet --disable-pip-version-check -r $<
	@touch $@

$(KAFKA_LIBS)/.installed: tests/kafka/pom.xml
	@command -v java >/dev/null || { echo "Apache Kafka needs Java 17+ (apt install openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "fetching Kafka needs Maven (apt install maven)"; exit 1; }
	cd tests/kafka && mvn -B -q dependency:copy-dependencies
	@touch $@

kafka-libs: $(KAFKA_LIBS)/.installed

# A broker for the README walk-through, in the background; returns once it serves (or says why
# not). Data in target/kafka/ (wiped at each start), log in target/kafka.log; `make kafka-stop`.
kafka: kafka-libs
	@mkdir -p target
	@tests/kafka/broker.sh $(CURDIR)/target/kafka $(KAFKA_PORT) > target/kafka.log 2>&1 & echo $$! > target/kafka.pid
	@for i in $$(seq 1 90); do \
	  if grep -q 'Kafka Server started' target/kafka.log; then \
	    echo "Kafka 4.4.0 serving on 127.0.0.1:$(KAFKA_PORT) (pid $$(cat target/kafka.pid), log target/kafka.log); make kafka-stop stops it"; exit 0; fi; \
	  if ! kill -0 $$(cat target/kafka.pid) 2>/dev/null; then echo "Kafka did not start:"; tail -20 target/kafka.log; exit 1; fi; \
	  sleep 1; done; echo "Kafka not serving after 90 s; see target/kafka.log"; exit 1

kafka-stop:
	@if [ -f target/kafka.pid ] && kill $$(cat target/kafka.pid) 2>/dev/null; then echo "Kafka stopped"; else echo "no Kafka started by make kafka is running"; fi
	@rm -f target/kafka.pid

# The secured broker of the README's secured walk-through (tests/kafka/broker.sh, KAFKA_SECURITY=
# secured): SASL_SSL (SCRAM-SHA-256/512, PLAIN, OAUTHBEARER) on 127.0.0.1:9093, the controller on
# 9094, mTLS on 9095, the StandardAuthorizer denying what no ACL allows, super user User:admin.
# Data, CA, client certificates and passwords in target/kafka-secured/ (made afresh at each start),
# log in target/kafka-secured.log. Once it serves, target/kafka-secured/admin.properties holds the
# super user's Java client config (SCRAM-SHA-512 over SASL_SSL) for kafka-topics.sh,
# kafka-acls.sh and the console producer and consumer (all take it as --command-config).
# `make kafka-secured-stop` stops it.
KAFKA_SECURED_PORT ?= 9093
KAFKA_SECURED_DIR := target/kafka-secured
.PHONY: kafka-secured kafka-secured-stop
kafka-secured: kafka-libs
	@if [ -f target/kafka-secured.pid ] && kill -0 $$(cat target/kafka-secured.pid) 2>/dev/null; then \
	  echo "Kafka (secured) already running (pid $$(cat target/kafka-secured.pid)): make kafka-secured-stop first"; exit 1; fi
	@mkdir -p target
	@KAFKA_SECURITY=secured tests/kafka/broker.sh $(CURDIR)/$(KAFKA_SECURED_DIR) $(KAFKA_SECURED_PORT) \
	  $$(($(KAFKA_SECURED_PORT) + 1)) $$(($(KAFKA_SECURED_PORT) + 2)) > target/kafka-secured.log 2>&1 & \
	  echo $$! > target/kafka-secured.pid
	@for i in $$(seq 1 90); do \
	  if grep -q 'Kafka Server started' target/kafka-secured.log; then break; fi; \
	  if ! kill -0 $$(cat target/kafka-secured.pid) 2>/dev/null; then echo "Kafka (secured) did not start:"; tail -20 target/kafka-secured.log; exit 1; fi; \
	  if [ $$i = 90 ]; then echo "Kafka (secured) not serving after 90 s; see target/kafka-secured.log"; exit 1; fi; \
	  sleep 1; done
	@d=$(CURDIR)/$(KAFKA_SECURED_DIR); umask 077; { \
	  echo "# The super user User:admin over SASL_SSL with SCRAM-SHA-512 (written by make kafka-secured)"; \
	  echo "security.protocol=SASL_SSL"; \
	  echo "sasl.mechanism=SCRAM-SHA-512"; \
	  echo "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$$(cat $$d/users/admin.password)\";"; \
	  echo "ssl.truststore.type=PEM"; \
	  echo "ssl.truststore.location=$$d/tls/ca.pem"; \
	  } > $$d/admin.properties
	@p=$(KAFKA_SECURED_PORT); d=$(KAFKA_SECURED_DIR); \
	  echo "Kafka 4.4.0 secured (pid $$(cat target/kafka-secured.pid), log target/kafka-secured.log); make kafka-secured-stop stops it"; \
	  echo "  127.0.0.1:$$p SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER; 127.0.0.1:$$((p + 2)) mTLS; super user User:admin"; \
	  echo "  CA $$d/tls/ca.pem; passwords $$d/users/{admin,cojoin}.password; certificates $$d/tls/{admin,cojoin}.{pem,key}"; \
	  echo "  as the super user: tests/kafka/kafka-topics.sh --bootstrap-server 127.0.0.1:$$p --command-config $$d/admin.properties --list"; \
	  echo "  (the same --command-config for kafka-acls.sh and for the console producer and consumer)"

# Returns once the broker has exited (its ports free for the next start), or after 30 s.
kafka-secured-stop:
	@if [ -f target/kafka-secured.pid ] && pid=$$(cat target/kafka-secured.pid) && kill $$pid 2>/dev/null; then \
	  for i in $$(seq 1 30); do kill -0 $$pid 2>/dev/null || break; sleep 1; done; \
	  if kill -0 $$pid 2>/dev/null; then echo "Kafka (secured) still stopping after 30 s (pid $$pid)"; else echo "Kafka (secured) stopped"; fi; \
	else echo "no Kafka started by make kafka-secured is running"; fi
	@rm -f target/kafka-secured.pid

setup: wasm-target $(COMPONENTIZE_PY) $(COMPONENTIZE_JS) kafka-libs

# --- plugins ------------------------------------------------------------------------------------
rust-plugins: wasm-target
	cd plugins/rust && $(CARGO) build --release --target wasm32-wasip2 --quiet
	@mkdir -p $(OUT)
	@for p in $(RUST_PLUGINS); do cmp -s plugins/rust/target/wasm32-wasip2/release/$$p.wasm $(OUT)/$$p.wasm \
	  || cp plugins/rust/target/wasm32-wasip2/release/$$p.wasm $(OUT)/$$p.wasm; done
	@cmp -s $(OUT)/order_paid.wasm $(OUT)/order_paid_rust.wasm || cp $(OUT)/order_paid.wasm $(OUT)/order_paid_rust.wasm
	@cmp -s $(OUT)/order_shipped.wasm $(OUT)/order_shipped_rust.wasm || cp $(OUT)/order_shipped.wasm $(OUT)/order_shipped_rust.wasm

# Built as `cojoin plugin build` builds a Python project: through its loader, which adds
# on_batch (world plugin-batched) to the app's WitWorld.
PY_LOADER := build/python-loader/cojoin_app_loader.py
$(PY_LOADER): host/templates/loader.py
	@mkdir -p $(dir $@)
	cp $< $@

$(OUT)/%_python.wasm: plugins/python/%/app.py wit/plugin.wit $(PY_LOADER) $(COMPONENTIZE_PY)
	@mkdir -p $(OUT)
	$(COMPONENTIZE_PY) -d wit -w plugin-batched componentize -p plugins/python/$* -p $(dir $(PY_LOADER)) cojoin_app_loader -o $@.tmp
	@mv $@.tmp $@

# A plugin of world plugin-n (joins of three topics or more) serves its own on_batch_n: built
# without the loader.
$(OUT)/order_shipped_python.wasm: plugins/python/order_shipped/app.py wit/plugin.wit $(COMPONENTIZE_PY)
	@mkdir -p $(OUT)
	$(COMPONENTIZE_PY) -d wit -w plugin-n componentize -p plugins/python/order_shipped app -o $@.tmp
	@mv $@.tmp $@

# componentize-js is called directly: `jco componentize` 1.35 cannot read the WIT path here.
# `-d http -d fetch-event` keeps wasi:http out of the component's imports. As `cojoin plugin
# build` builds a JS project: the source with onBatch appended (world plugin-batched).
$(OUT)/%_js.wasm: build/js-batched/%.js wit/plugin.wit $(COMPONENTIZE_JS)
	@mkdir -p $(OUT)
	$(COMPONENTIZE_JS) $< --wit wit --world-name plugin-batched -d http -d fetch-event -o $@.tmp
	@mv $@.tmp $@

# World plugin-n serves its own onBatchN: built from the source as it is.
$(OUT)/order_shipped_js.wasm: plugins/js/order-shipped.js wit/plugin.wit $(COMPONENTIZE_JS)
	@mkdir -p $(OUT)
	$(COMPONENTIZE_JS) $< --wit wit --world-name plugin-n -d http -d fetch-event -o $@.tmp
	@mv $@.tmp $@

# Kept: make would delete them as intermediates after every build.
.PRECIOUS: build/js-batched/%.js
JOIN_BATCH_JS = mkdir -p $(dir $@) && cat $< > $@ && echo >> $@ && cat host/templates/batch.js >> $@
build/js-batched/%.js: plugins/js/%.js host/templates/batch.js
	$(JOIN_BATCH_JS)

build/js-batched/order_paid.js: plugins/js/order-paid.js host/templates/batch.js
	$(JOIN_BATCH_JS)

plugins: rust-plugins $(OUT)/order_paid_python.wasm $(OUT)/order_paid_js.wasm $(OUT)/noop_python.wasm $(OUT)/noop_js.wasm \
  $(OUT)/misbehave_python.wasm $(OUT)/misbehave_js.wasm $(OUT)/order_shipped_python.wasm $(OUT)/order_shipped_js.wasm \
  $(OUT)/order_enriched_python.wasm

# --- host ---------------------------------------------------------------------------------------
# Built as the tests build it (`cargo test --no-run` also builds the cojoin binary): a plain
# `cargo build -p cojoin` resolves dependency features without the dev-dependencies, so `make test`
# afterwards would compile wasmtime a second time (about 7 minutes here).
host:
	$(CARGO) test --release --workspace --no-run

# The binary `host` built and the demo's Python plugin, packed by packaging/wheel.py (stdlib only,
# offline; see its docstring).
wheel: host $(OUT)/order_paid_python.wasm $(OUT)/order_shipped_python.wasm
	$(PY) packaging/wheel.py $(HOST) host/Cargo.toml build/wheels $(OUT)/order_paid_python.wasm \
	  $(OUT)/order_shipped_python.wasm

demo: plugins host
	$(HOST) demo

test: plugins kafka-libs
	@mkdir -p build
	COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) $(CARGO) test --release --workspace --no-fail-fast 2>&1 | tee build/test.log; \
	  status=$${PIPESTATUS[0]}; \
	  echo "== test summary"; grep -E '^test result:' build/test.log | \
	  awk '{p+=$$4; f+=$$6; i+=$$8} END {printf "passed %d, failed %d, ignored %d\n", p, f, i}'; \
	  exit $$status

bench: plugins
	COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) $(CARGO) bench -p cojoin --bench plugin_call
	COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) $(CARGO) bench -p cojoin --bench plugin_load

bench-matcher:
	$(CARGO) bench -p cojoin --bench matcher
	$(CARGO) bench -p cojoin --bench memory

# The Java peers of the join and latency benchmarks (Kafka Streams, Flink), each built by Maven
# once per change of its sources.
KSTREAMS := host/benches/peers/kafka-streams
$(KSTREAMS)/target/.built: $(KSTREAMS)/pom.xml $(KSTREAMS)/src/main/java/dev/cojoin/bench/KafkaStreamsJoin.java
	cd $(KSTREAMS) && mvn -B -q package dependency:copy-dependencies
	@touch $@

FLINK := host/benches/peers/flink
$(FLINK)/target/.built: $(FLINK)/pom.xml $(FLINK)/src/main/java/dev/cojoin/bench/FlinkJoin.java
	cd $(FLINK) && mvn -B -q package dependency:copy-dependencies
	@touch $@

bench-join: plugins host kafka-libs $(VENV_BENCH)/.installed $(KSTREAMS)/target/.built $(FLINK)/target/.built
	COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) PYTHON_BENCH=$(CURDIR)/$(VENV_BENCH)/bin/python \
	  $(CARGO) bench -p cojoin-e2e --bench join

# The three-topic data set (orders, payments, shipments; issue 32): cojoin's three-way join with
# the Rust and Python order-shipped plugins against Kafka Streams' and Flink's two chained joins.
# The other BENCH_* settings apply as to bench-join, e.g. BENCH_RECORDS=20000 BENCH_RUNS=1.
bench-join-3:
	BENCH_TOPICS=3 $(MAKE) bench-join

# The stream-table data set (issue 33): a table of customers (BENCH_TABLE_ROWS rows, default
# BENCH_RECORDS, a tenth of them updated once), then BENCH_RECORDS orders keyed by customer;
# cojoin's table join (Rust and Python order-paid plugins) against Kafka Streams' KStream-KTable
# and KStream-GlobalKTable joins and Quix Streams' join_asof, and each table's restore after a
# restart. The other BENCH_* settings apply as to bench-join.
bench-join-table:
	BENCH_DATA=table $(MAKE) bench-join

# From saving a Python plugin's app.py to its first result on a running demo host, 5 rounds.
bench-edit: plugins host
	COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) $(CARGO) bench -p cojoin-e2e --bench edit_to_live

# End-to-end latency (payment sent -> output read by a read_committed reader), p50 and p99,
# at-least-once against exactly-once, on Apache Kafka.
bench-latency: plugins host kafka-libs $(KSTREAMS)/target/.built $(FLINK)/target/.built
	COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) $(CARGO) bench -p cojoin-e2e --bench latency

# Five rounds of kill -9 of one of three hosts on Kafka, each with its matches, expiries,
# duplicates and their bound (the records past the last commit), for two topics and then for a
# join of three (tests/tests/kafka_three.rs); then a minute of hosts joining
# and leaving under load, per group protocol. Not part of CI.
soak: plugins host kafka-libs soak-memory
	@mkdir -p build
	set -o pipefail; COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) COJOIN_KILL_ROUNDS=$${COJOIN_KILL_ROUNDS:-5} $(CARGO) test --release \
	  -p cojoin-e2e --test kafka_join one_of_three_hosts_killed -- --nocapture 2>&1 | tee build/soak.log | \
	  grep -E 'kill -9|test result'
	set -o pipefail; COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) COJOIN_KILL_ROUNDS=$${COJOIN_KILL_ROUNDS:-5} $(CARGO) test --release \
	  -p cojoin-e2e --test kafka_three one_killed -- --nocapture 2>&1 | tee -a build/soak.log | \
	  grep -E 'kill -9 rounds|test result'
	set -o pipefail; COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) $(CARGO) test --release -p cojoin-e2e --test kafka_scale \
	  -- --ignored --nocapture storm 2>&1 | tee -a build/soak.log | grep -E 'storm:|test result'
	set -o pipefail; COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) COJOIN_EOS_KILLS=$${COJOIN_EOS_KILLS:-5} $(CARGO) test --release \
	  -p cojoin-e2e --test kafka_eos kill -- --nocapture 2>&1 | tee -a build/soak.log | grep -E 'round\(s\)|test result'

# Memory bounded whatever the backlog and the window (issue 16), on Apache Kafka through the join
# benchmark: (1) the Python plugin behind a backlog of 1M, then 5M records per topic, produced
# before the host starts, at the default memory.queue_bytes: peak RSS must not grow with the
# backlog; (2) a left join whose 10^9 ms window holds, at its peak, over 5 GB of 4.2M + 4.2M 1 KiB
# records, with memory.state_bytes = 256 MiB and then 16 GiB (all in RAM): peak RSS, records/s, and
# the output topic checked to hold exactly the expected outcome per order (BENCH_VERIFY).
SOAK_BACKLOGS ?= 1000000 5000000
SOAK_WINDOW_RECORDS ?= 4200000
soak-memory: plugins host kafka-libs $(VENV_BENCH)/.installed
	@mkdir -p build
	set -o pipefail; for n in $(SOAK_BACKLOGS); do \
	  COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) PYTHON_BENCH=$(CURDIR)/$(VENV_BENCH)/bin/python BENCH_RUNS=1 \
	    BENCH_RECORDS=$$n BENCH_SYSTEMS=cojoin-python $(CARGO) bench -p cojoin-e2e --bench join 2>&1 \
	    | tee -a build/soak-memory.log | grep -E '^(join benchmark|system|cojoin)'; done
	set -o pipefail; for budget in 256MiB 16GiB; do \
	  COJOIN_TEST_PLUGINS=$(CURDIR)/$(OUT) PYTHON_BENCH=$(CURDIR)/$(VENV_BENCH)/bin/python BENCH_RUNS=1 \
	    BENCH_RECORDS=$(SOAK_WINDOW_RECORDS) BENCH_VALUE_BYTES=1024 BENCH_WINDOW_MS=1000000000 BENCH_KIND=left \
	    BENCH_VERIFY=1 BENCH_MEMORY="state_bytes = \"$$budget\"" BENCH_SYSTEMS=cojoin-rust \
	    $(CARGO) bench -p cojoin-e2e --bench join 2>&1 | tee -a build/soak-memory.log \
	    | grep -E '^(join benchmark|system|cojoin|verify)'; done
