//! A secured broker's users and how clients log in: the listeners and credentials
//! `tests/kafka/broker.sh` made, the librdkafka options for each [`Auth`], and the client config
//! every helper connects with (the super user on a secured broker).

use std::path::{Path, PathBuf};

use rdkafka::ClientConfig;

use super::Kafka;

/// What clients need to reach a secured broker (made afresh by `tests/kafka/broker.sh` at every
/// start, under its log directory).
#[derive(Clone, Debug)]
pub struct Security {
    /// The SASL_SSL listener (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER), `127.0.0.1:port`.
    pub sasl_ssl: String,
    /// The SSL listener, which requires a client certificate (mTLS), `127.0.0.1:port`.
    pub ssl: String,
    /// The test CA (PEM) that signed the broker's and the clients' certificates.
    pub ca: PathBuf,
    /// The super user.
    pub admin: Credentials,
    /// The user the host under test connects as; it may do what ACLs grant `User:cojoin`.
    pub cojoin: Credentials,
}

/// One user of a secured broker: the same name for SCRAM, PLAIN, OAUTHBEARER and its certificate
/// (CN=`user`), so each way of logging in is the same principal `User:<user>`.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub user: String,
    /// `<user>-secret-<random hex>`, new at each broker start: a test can search output for it.
    pub password: String,
    /// The file that holds the password (for a config's `{ file = "…" }`).
    pub password_file: PathBuf,
    /// The client certificate (PEM), signed by [`Security::ca`].
    pub certificate: PathBuf,
    /// Its private key (PEM, unencrypted).
    pub key: PathBuf,
}

/// How a client authenticates to a secured broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// SASL_SSL with SCRAM-SHA-512.
    Scram512,
    /// SASL_SSL with SCRAM-SHA-256.
    Scram256,
    /// SASL_SSL with PLAIN (the password checked against the broker's JAAS config).
    Plain,
    /// The SSL listener with a client certificate.
    Mtls,
    /// SASL_SSL with OAUTHBEARER, an unsigned JWT from librdkafka's built-in token maker (the
    /// broker's default validator accepts any; tests only).
    OAuthBearer,
}

impl Auth {
    pub const ALL: [Auth; 5] = [
        Auth::Scram512,
        Auth::Scram256,
        Auth::Plain,
        Auth::Mtls,
        Auth::OAuthBearer,
    ];
}

impl Security {
    /// The bootstrap address and the librdkafka options with which `who` connects by `how`.
    pub fn settings(&self, who: &Credentials, how: Auth) -> (String, Vec<(String, String)>) {
        let ca = self.ca.display().to_string();
        let sasl = |mechanism: &str| {
            vec![
                ("security.protocol", "SASL_SSL".to_owned()),
                ("sasl.mechanism", mechanism.to_owned()),
                ("ssl.ca.location", ca.clone()),
            ]
        };
        let (bootstrap, options) = match how {
            Auth::Scram512 | Auth::Scram256 | Auth::Plain => {
                let mechanism = match how {
                    Auth::Scram512 => "SCRAM-SHA-512",
                    Auth::Scram256 => "SCRAM-SHA-256",
                    _ => "PLAIN",
                };
                let mut options = sasl(mechanism);
                options.push(("sasl.username", who.user.clone()));
                options.push(("sasl.password", who.password.clone()));
                (&self.sasl_ssl, options)
            }
            Auth::OAuthBearer => {
                let mut options = sasl("OAUTHBEARER");
                options.push(("sasl.oauthbearer.config", format!("principal={}", who.user)));
                // Without a token refresh callback of its own, a client needs librdkafka's.
                options.push(("enable.sasl.oauthbearer.unsecure.jwt", "true".to_owned()));
                (&self.sasl_ssl, options)
            }
            Auth::Mtls => (
                &self.ssl,
                vec![
                    ("security.protocol", "SSL".to_owned()),
                    ("ssl.ca.location", ca.clone()),
                    (
                        "ssl.certificate.location",
                        who.certificate.display().to_string(),
                    ),
                    ("ssl.key.location", who.key.display().to_string()),
                ],
            ),
        };
        let options = options
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        (bootstrap.clone(), options)
    }
}

/// `options` as the lines of a TOML table (`"sasl.mechanism" = "SCRAM-SHA-512"`), e.g. under a
/// cojoin config's `[kafka.options]`.
pub fn toml_options(options: &[(String, String)]) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    options
        .iter()
        .map(|(k, v)| format!("{} = {}\n", quote(k), quote(v)))
        .collect()
}

impl Kafka {
    /// The librdkafka options with which the helpers connect: none on a plaintext broker, the
    /// super user `admin` over SASL_SSL with SCRAM-SHA-512 on a secured one. With
    /// [`Kafka::producer_with`], for a thread that does not own the `Kafka`.
    pub fn admin_settings(&self) -> Vec<(String, String)> {
        match &self.security {
            None => Vec::new(),
            Some(security) => security.settings(&security.admin, Auth::Scram512).1,
        }
    }

    /// The bootstrap address and librdkafka options (for `[kafka] bootstrap_servers` and
    /// `[kafka.options]`, see [`toml_options`]) with which a cojoin host connects to this secured
    /// broker as `cojoin`, by `how`. Panics on a plaintext broker.
    pub fn cojoin_kafka_settings(&self, how: Auth) -> (String, Vec<(String, String)>) {
        let security = self.security.as_ref().unwrap_or_else(|| {
            panic!(
                "the broker on {} is plaintext: start it with Kafka::start_secured",
                self.bootstrap
            )
        });
        security.settings(&security.cojoin, how)
    }

    /// A client config pointed at this broker, as the super user on a secured one.
    pub(crate) fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in self.admin_settings() {
            config.set(k, v);
        }
        config
    }
}

impl Security {
    /// The material `tests/kafka/broker.sh` made in `data` (its log directory) for listeners on
    /// `sasl_ssl` and `ssl`.
    pub(super) fn read(data: &Path, sasl_ssl: u16, ssl: u16) -> Security {
        let user = |name: &str| {
            let password_file = data.join(format!("users/{name}.password"));
            Credentials {
                user: name.to_owned(),
                password: std::fs::read_to_string(&password_file)
                    .unwrap_or_else(|e| panic!("reading {password_file:?}: {e}")),
                password_file,
                certificate: data.join(format!("tls/{name}.pem")),
                key: data.join(format!("tls/{name}.key")),
            }
        };
        Security {
            sasl_ssl: format!("127.0.0.1:{sasl_ssl}"),
            ssl: format!("127.0.0.1:{ssl}"),
            ca: data.join("tls/ca.pem"),
            admin: user("admin"),
            cojoin: user("cojoin"),
        }
    }
}
