//! An Apache Kafka broker started as a separate process for one test or benchmark (the
//! single-node KRaft broker of `tests/kafka/broker.sh`, on free loopback ports with a fresh log
//! directory), and the Kafka clients the tests use around it: admin, producer, reader.
//!
//! A broker is plaintext ([`Kafka::start`]) or secured ([`Kafka::start_secured`]: TLS, SASL,
//! mTLS and ACLs, see the script's header). On a secured broker every helper here connects as the
//! super user `admin` (SASL_SSL, SCRAM-SHA-512), so a test sets up topics and reads results as
//! usual; [`Kafka::cojoin_kafka_settings`] gives what the host under test needs to connect as the
//! unprivileged user `cojoin`, and `crate::acl` what `cojoin` may do.
//!
//! - `process`: starting, restarting, signalling and stopping the broker ([`Kafka`]).
//! - `security`: a secured broker's users, [`Auth`] and the clients' settings.
//! - `topics`: creating topics, watermarks, committed offsets, log segments on disk.
//! - `produce`: producers and producing records.
//! - `read`: reading a topic back ([`Reader`]).

mod process;
mod produce;
mod read;
mod security;
mod topics;

pub use process::{broker_script, free_port, signal, Kafka};
pub use read::{ReadRecord, Reader};
pub use security::{toml_options, Auth, Credentials, Security};
