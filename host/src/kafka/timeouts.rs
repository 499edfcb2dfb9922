//! How long the host waits on the broker, in one place: each client module had its own constant,
//! six of them, with the same few values and no word on why.

use std::time::Duration;

/// One request answered by a broker the host can reach: metadata, watermarks, committed offsets,
/// a seek, a describe, a TLS handshake. Past it the broker is taken as unreachable and the error
/// names `kafka.bootstrap_servers`.
pub const REQUEST: Duration = Duration::from_secs(10);

/// A step that waits on the group or transaction coordinator, or on a topic being created:
/// committing, initialising or aborting a transaction, the repartition step's writes
/// acknowledged and its topics shown. These legitimately take seconds on a loaded cluster.
pub const COORDINATED: Duration = Duration::from_secs(30);

/// Whether an output topic exists, asked on the sink's path (it waits on the answer with records
/// in hand, so shorter; a topic not found is asked again after `RECHECK_MISSING`).
pub const SINK_METADATA: Duration = Duration::from_secs(5);
