//! A `PluginWorker` is a task's action: calls go to its instance, failures become `ActionFailure`s.

use crate::event::{Event, OutputRecord, Side};
use crate::plugin::{CallError, PluginWorker};
use crate::task::{Action, ActionFailure};

fn failure(e: CallError) -> ActionFailure {
    tracing::warn!(kind = e.kind(), "{e}");
    ActionFailure {
        kind: e.kind(),
        message: e.message().to_owned(),
    }
}

impl Action for PluginWorker {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        PluginWorker::on_match(self, key, left, right).map_err(failure)
    }

    fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        side: Side,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        PluginWorker::on_expire(self, key, event, side).map_err(failure)
    }

    fn version(&self) -> String {
        let v = PluginWorker::version(self);
        format!("{}@{} (generation {})", v.name, v.sha256, v.generation)
    }
}
