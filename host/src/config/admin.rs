//! `[admin]`: the admin HTTP server's address, token and TLS files. Names only: the files are
//! read by `admin::tls` when the server starts.

use std::path::PathBuf;

use serde::Deserialize;

use super::{yes, ConfigError};
use crate::secret::Secret;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve `/metrics`, `/healthz`, `/readyz`, `/plugins`. Default: true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Address to listen on; port 0 picks a free one (logged). Default: `"127.0.0.1:9464"`.
    #[serde(default = "default_admin_bind")]
    pub bind: String,
    /// When set, every request but `/healthz` needs `Authorization: Bearer <token>`. Required when
    /// `bind` is not a loopback address. Default: none.
    /// A string, `{ env = "NAME" }` or `{ file = "/path" }` (see [`crate::secret`]).
    #[serde(default)]
    pub token: Option<Secret>,
    /// PEM file of the server's certificate (its chain may follow). With `tls_key`, the server
    /// speaks only HTTPS. Relative paths start from the working directory. Default: none.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of `tls_cert`'s private key (PKCS#8, RSA or EC; no passphrase). Default: none.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// PEM file of the CA(s) that sign client certificates: when set, a client must present one
    /// (mutual TLS). Needs `tls_cert` and `tls_key`. Default: none.
    #[serde(default)]
    pub tls_client_ca: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            bind: default_admin_bind(),
            token: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
        }
    }
}

/// The files of the admin server's TLS, as the config names them (`admin::tls` reads them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdminTlsFiles<'a> {
    pub cert: &'a std::path::Path,
    pub key: &'a std::path::Path,
    pub client_ca: Option<&'a std::path::Path>,
}

impl AdminConfig {
    /// The TLS files when `tls_cert` and `tls_key` are both set, `None` when neither is; an error
    /// when only one is, or when `tls_client_ca` is set without them. Names only: the files are
    /// read when the server starts.
    pub fn tls_files(&self) -> Result<Option<AdminTlsFiles<'_>>, ConfigError> {
        let invalid = |field, problem: &str, fix| ConfigError::Invalid {
            field,
            problem: problem.to_owned(),
            fix,
        };
        const BOTH: &str =
            "set both admin.tls_cert and admin.tls_key (PEM files), or neither for plain HTTP";
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(AdminTlsFiles {
                cert,
                key,
                client_ca: self.tls_client_ca.as_deref(),
            })),
            (Some(_), None) => Err(invalid(
                "admin.tls_key",
                "is missing but admin.tls_cert is set",
                BOTH,
            )),
            (None, Some(_)) => Err(invalid(
                "admin.tls_cert",
                "is missing but admin.tls_key is set",
                BOTH,
            )),
            (None, None) if self.tls_client_ca.is_some() => Err(invalid(
                "admin.tls_client_ca",
                "is set but admin.tls_cert and admin.tls_key are not (client certificates are checked only over TLS)",
                "set admin.tls_cert and admin.tls_key too, or remove admin.tls_client_ca",
            )),
            (None, None) => Ok(None),
        }
    }
}

fn default_admin_bind() -> String {
    "127.0.0.1:9464".into()
}
