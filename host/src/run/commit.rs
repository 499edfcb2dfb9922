//! Exactly-once: what a commit's outcome asks of the loop (every task back to its committed
//! points after an abort; a new transactional producer after a fatal error).

use anyhow::Result;

use crate::kafka::intake::Intake;
use crate::kafka::sink::Sink;
use crate::kafka::transaction::Outcome;
use crate::report::Happened;

use super::{Host, Running, MAX_RENEWALS};

impl Host {
    /// Exactly-once: after a commit, an aborted transaction sends every task back to its last
    /// committed points, and a fenced producer is renewed first.
    pub(super) fn after_commit(
        &self,
        outcome: Outcome,
        intake: &mut Intake,
        sink: &mut Sink,
        run: &mut Running,
    ) -> Result<()> {
        match outcome {
            Outcome::Aborted(_) => intake.rewind_all(&mut run.tasks),
            Outcome::Fatal(why) => self.renew_producer(&why, intake, sink, run),
            Outcome::Committed { .. } => {
                run.renewals = 0;
                Ok(())
            }
            Outcome::Nothing => Ok(()),
        }
    }

    /// Exactly-once: the transactional producer was fenced or failed for good (`why`) — the
    /// broker aborts a transaction it finds older than `transaction.timeout.ms`, after a restart
    /// say, and fences its producer. A new one with the same transactional id takes over (its
    /// registration ends the old transaction: no reader sees its outputs), and every task goes
    /// back to its last committed points. A producer fenced again and again without a commit
    /// between is another process with this transactional id (two hosts with the same
    /// `kafka.instance_id`): the host stops.
    pub(super) fn renew_producer(
        &self,
        why: &str,
        intake: &mut Intake,
        sink: &mut Sink,
        run: &mut Running,
    ) -> Result<()> {
        run.renewals += 1;
        if run.renewals > MAX_RENEWALS {
            anyhow::bail!(
                "{why}; the transactional producer was renewed {MAX_RENEWALS} times without a commit between: another process may use this transactional id (two hosts with the same kafka.instance_id?); stopping without committing (a restart resumes from the last commit)"
            );
        }
        Happened::ProducerRenewed { why }.emit(&self.metrics);
        sink.renew(&mut || intake.keep_alive())?;
        intake.rewind_all(&mut run.tasks)
    }
}
