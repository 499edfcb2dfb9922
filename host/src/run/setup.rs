//! What `cojoin run` starts before its loop: the group protocol chosen, the authorisations
//! checked, the repartition step (if a side is re-keyed), the sink, the source subscribed, the
//! intake, the worker threads, and the loop's state.

use std::collections::HashMap;

use anyhow::{Context, Result};

use crate::config::Guarantee;
use crate::kafka::global_table::{Following, GlobalTable};
use crate::kafka::intake::Intake;
use crate::kafka::protocol::{self, Protocol};
use crate::kafka::repartitioner::{self, Repartitioner};
use crate::kafka::sink::Sink;
use crate::kafka::source::Source;
use crate::kafka::transaction::{self};
use crate::kafka::{assignment, authz, client};
use crate::repartition;
use crate::report::Happened;
use crate::task::backpressure::{self};

use super::action::MeteredAction;
use super::tasks::Held;
use super::{spill_dir, Host, Running, REPARTITIONED_MAX_IDLE_MS};

/// What the loop runs with.
pub(super) struct Started {
    pub repartitioner: Option<Repartitioner>,
    pub sink: Sink,
    pub intake: Intake,
    pub workers: Vec<MeteredAction>,
    pub run: Running,
    /// A global table's reader, kept up to date while the loop runs.
    pub global: Option<Following>,
}

impl Host {
    pub(super) fn start(&self) -> Result<Started> {
        let cfg = &self.config;
        // A side re-keyed into an internal topic is read from there (crate::repartition).
        let source_counts = repartitioner::partition_counts(cfg)?;
        let plan = repartition::plan(&cfg.join, &cfg.kafka.group_id, &source_counts);
        // Before anything joins, creates or writes: a missing ACL stops the host here, named.
        authz::require(cfg, &plan, &self.metrics)?;
        let (protocol, why) =
            protocol::choose(cfg.kafka.group_protocol, &cfg.kafka.options, || {
                protocol::broker_protocols(&client::base(&cfg.kafka))
            });
        Happened::GroupProtocol {
            protocol: protocol.as_str(),
            why: &why,
        }
        .emit(&self.metrics);
        let repartitioner = if plan.sides.is_empty() {
            None
        } else {
            Some(Repartitioner::start(
                cfg,
                &plan,
                protocol,
                self.metrics.clone(),
            )?)
        };
        if !plan.sides.is_empty() {
            // The internal topics exist now: what the broker could not tell before they did
            // (Write, Read, Delete on them) is asked again.
            authz::require(cfg, &plan, &self.metrics)?;
        }
        let transactional_id = (cfg.output.guarantee == Guarantee::ExactlyOnce).then(|| {
            transaction::transactional_id(&cfg.kafka.group_id, cfg.kafka.instance_id.as_deref())
        });
        let mut sink = Sink::new(
            &client::producer(&cfg.kafka, cfg.output.compression),
            &cfg.output.topic,
            cfg.output.dead_letter_topic.as_deref(),
            self.metrics.clone(),
            transactional_id.as_deref(),
        )?;
        sink.set_principal(crate::acl::principal(cfg));
        let consumer_config = client::consumer(
            &cfg.kafka,
            protocol,
            backpressure::prefetch_limit(cfg.memory.queue_bytes),
        );
        let transactions = sink.transactions();
        let metrics = self.metrics.clone();
        let source_topics = plan.join_topics.clone();
        let principal = crate::acl::principal(cfg);
        // A co-partitioned table is read by the group, each partition from its beginning.
        let table = cfg.join.table.is_some() && !cfg.join.table_is_global();
        let new_source = move || -> Result<Source> {
            let mut source = Source::new(
                &consumer_config,
                &source_topics,
                metrics.clone(),
                transactions.clone(),
            )?;
            source.set_principal(principal.clone());
            if table {
                source.read_from_start(crate::task::TABLE_SIDE);
            }
            Ok(source)
        };
        let spill = spill_dir(&cfg.state.dir())?;
        // A global table is read whole before the host joins its group: no stream record is
        // joined with a table still loading, and a long restore does not keep a member away.
        let global = match cfg.join.table_is_global() {
            true => {
                let reader = GlobalTable::restore(cfg, self.metrics.clone(), spill.clone())?;
                Some((reader.table(), reader.follow()?))
            }
            false => None,
        };
        let source = new_source()?;
        let counts = plan.join_counts(&source_counts);
        let read: Vec<(&str, usize)> = (plan.join_topics.iter().map(String::as_str))
            .zip(counts.iter().copied())
            .collect();
        assignment::check_counts(&read)?;
        sink.verify_topics()?;
        source.subscribe()?;
        Happened::JoiningGroup {
            topics: &plan.join_topics,
            partitions: counts[0],
            group: &cfg.kafka.group_id,
        }
        .emit(&self.metrics);

        let mut policy = crate::wiring::task_policy(cfg);
        if !plan.sides.is_empty() && policy.max_idle_ms < REPARTITIONED_MAX_IDLE_MS {
            // The repartition step writes in bursts (a batch, then its flush and commit): at the
            // tip of an internal topic a partition looks caught up between two bursts, and with a
            // shorter idle wait the task went on without it (14% of a backlog found late at
            // 100 ms, none at 1 s: BENCHMARKS.md).
            tracing::info!(
                configured_ms = policy.max_idle_ms,
                "join.max_idle raised to {REPARTITIONED_MAX_IDLE_MS} ms: a side is repartitioned"
            );
            policy.max_idle_ms = REPARTITIONED_MAX_IDLE_MS;
        }
        if let Some((table, _)) = &global {
            policy.table = Some(crate::task::TableJoin::Global(table.clone()));
        }
        let global = global.map(|(_, following)| following);
        let workers = self.start_workers(counts[0])?;
        // Asked read_uncommitted: the log end, past a transaction still open, whose records a
        // read_committed consumer gets once it commits and a task waits for (join/order.rs).
        let watermarks = client::reader(&cfg.kafka, &cfg.kafka.group_id)
            .set("isolation.level", "read_uncommitted")
            .create()
            .context(
            "creating the Kafka client that asks end offsets (check [kafka] and [kafka.options])",
        )?;
        let intake = Intake::new(
            source,
            watermarks,
            Box::new(new_source),
            protocol == Protocol::Classic,
            cfg.memory.queue_bytes,
            self.metrics.clone(),
        );
        let run = Running {
            tasks: Held::new(policy, cfg.memory.state_bytes, spill),
            published: Default::default(),
            lags: HashMap::new(),
            queue_bytes: cfg.memory.queue_bytes,
            topics: plan.join_topics.len(),
            renewals: 0,
        };
        Ok(Started {
            repartitioner,
            sink,
            intake,
            workers,
            run,
            global,
        })
    }
}
