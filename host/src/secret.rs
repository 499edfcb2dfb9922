//! Secrets in the configuration: passwords, tokens and key passphrases, given inline or read from
//! an environment variable or a file, and never printed.
//!
//! ```toml
//! [kafka.options]
//! "sasl.password" = { env = "COJOIN_SASL_PASSWORD" }
//! "ssl.key.password" = { file = "/run/secrets/kafka-key-password" }
//! [admin]
//! token = { file = "/run/secrets/cojoin-admin-token" }
//! ```
//!
//! The value is read once, while the configuration is parsed, so a missing variable or an
//! unreadable file is a config error at start (naming the variable or the file, never the value),
//! not a failed login later. A [`Secret`]'s `Debug` and `Display` print `<redacted>`: a config
//! dumped into a log line, an error or a panic message carries no secret. Depends on serde only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// A value that must not be printed. [`Secret::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that needs it (a client config, a comparison).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How a value is given in the file: inline, `{ env = "NAME" }` or `{ file = "/path" }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Source {
    Inline(String),
    Env { env: String },
    File { file: PathBuf },
    // Anything else: refused with a message saying what is accepted (serde's untagged error
    // says only "did not match any variant").
    Other(#[allow(dead_code)] toml::Value),
}

impl Source {
    /// The value, and whether it came from outside the file (then it is a secret whatever its
    /// option's name).
    fn read(self) -> Result<(String, bool), String> {
        match self {
            Source::Inline(v) => Ok((v, false)),
            Source::Env { env } => match std::env::var(&env) {
                Ok(v) => Ok((v, true)),
                Err(std::env::VarError::NotPresent) => Err(format!(
                    "environment variable {env} is not set: export it before starting cojoin, or give the value inline or as {{ file = \"…\" }}"
                )),
                Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                    "environment variable {env} is not valid UTF-8"
                )),
            },
            Source::File { file } => match std::fs::read_to_string(&file) {
                // A file written by `echo` or a secrets manager ends with a newline that is not
                // part of the secret.
                Ok(v) => Ok((v.strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v)).unwrap_or(&v).to_owned(), true)),
                Err(e) => Err(format!(
                    "cannot read secret file {file:?}: {e}: check the path and that cojoin may read it"
                )),
            },
            Source::Other(_) => Err(
                "expected a string, { env = \"VARIABLE\" } or { file = \"/path\" }".to_owned(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (value, _) = Source::deserialize(d)?
            .read()
            .map_err(serde::de::Error::custom)?;
        Ok(Secret(value))
    }
}

/// librdkafka options whose values are secrets even when written inline.
const SECRET_OPTIONS: [&str; 7] = [
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "ssl_key",
];

/// `kafka.options`: raw librdkafka options, each a string, `{ env = … }` or `{ file = … }`. Reads
/// as the map of resolved values (the clients need them as text); prints with the secret ones
/// (read from outside the file, or named in [`SECRET_OPTIONS`]) redacted.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Options {
    values: BTreeMap<String, String>,
    secret: BTreeSet<String>,
}

impl Options {
    /// Whether `option`'s value must not be printed.
    pub fn is_secret(&self, option: &str) -> bool {
        self.secret.contains(option)
    }
}

impl std::ops::Deref for Options {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.values
    }
}

impl<'a> IntoIterator for &'a Options {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.values.iter()
    }
}

impl<const N: usize> From<[(&str, &str); N]> for Options {
    fn from(pairs: [(&str, &str); N]) -> Self {
        let values: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let secret = values
            .keys()
            .filter(|k| SECRET_OPTIONS.contains(&k.as_str()))
            .cloned()
            .collect();
        Options { values, secret }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (k, v) in &self.values {
            if self.is_secret(k) {
                map.entry(k, &"<redacted>");
            } else {
                map.entry(k, v);
            }
        }
        map.finish()
    }
}

impl<'de> Deserialize<'de> for Options {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, Source>::deserialize(d)?;
        let mut options = Options::default();
        for (name, source) in raw {
            let (value, external) = source
                .read()
                .map_err(|e| serde::de::Error::custom(format!("option {name:?}: {e}")))?;
            if external || SECRET_OPTIONS.contains(&name.as_str()) {
                options.secret.insert(name.clone());
            }
            options.values.insert(name, value);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        options: Options,
        token: Option<Secret>,
    }

    fn parse(text: &str) -> Result<Doc, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_secret_comes_inline_from_the_environment_or_from_a_file_and_never_prints() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-a-file-7e1\n").unwrap();
        // A name no other test sets: tests run in parallel in one process.
        std::env::set_var("COJOIN_TEST_SECRET_9F2", "from-the-env-4c8");
        let doc = parse(&format!(
            "token = {{ file = {file:?} }}\n[options]\n\"sasl.password\" = {{ env = \"COJOIN_TEST_SECRET_9F2\" }}\n\"ssl.key.password\" = \"inline-5d3\"\n\"fetch.wait.max.ms\" = \"100\"\n"
        ))
        .unwrap();
        assert_eq!(doc.token.as_ref().unwrap().expose(), "from-a-file-7e1");
        assert_eq!(doc.options["sasl.password"], "from-the-env-4c8");
        assert_eq!(doc.options["ssl.key.password"], "inline-5d3");
        let printed = format!("{doc:?} {}", doc.token.as_ref().unwrap());
        for secret in ["from-a-file-7e1", "from-the-env-4c8", "inline-5d3"] {
            assert!(!printed.contains(secret), "{secret} in {printed}");
        }
        // Options that are not secrets stay readable in a dump.
        assert!(
            printed.contains("\"fetch.wait.max.ms\": \"100\""),
            "{printed}"
        );
    }

    #[test]
    fn a_missing_variable_or_file_names_it_and_the_fix() {
        let err = parse("[options]\n\"sasl.password\" = { env = \"COJOIN_TEST_UNSET_71A\" }\n")
            .unwrap_err();
        assert!(
            err.contains("COJOIN_TEST_UNSET_71A is not set") && err.contains("export it"),
            "{err}"
        );
        let err =
            parse("token = { file = \"/nonexistent/cojoin-token\" }\n[options]\n").unwrap_err();
        assert!(
            err.contains("/nonexistent/cojoin-token") && err.contains("check the path"),
            "{err}"
        );
        let err = parse("[options]\n\"sasl.password\" = { vault = \"x\" }\n").unwrap_err();
        assert!(
            err.contains("{ env = \\\"VARIABLE\\\" }") || err.contains("{ env = \"VARIABLE\" }"),
            "{err}"
        );
    }
}
