//! `cojoin plugin deploy`: one `PUT /plugins/<name>.wasm` to a running host's admin server, and
//! its answer: the version now live, or why the host refused it.
//!
//! HTTP by ureq, with `Expect: 100-continue`: a host that refuses the upload on its head (wrong
//! token, too large) says so before the component is sent. The URL, the name and the reading of
//! the answer are pure and tested apart from the network.

use std::time::Duration;

/// The host compiles and instantiates the upload before answering: a large Python component takes
/// tens of seconds on a small machine.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    #[error("admin URL {url:?} {problem}: give http://host:port of the host's admin server (admin.bind), e.g. http://127.0.0.1:9464")]
    BadUrl { url: String, problem: &'static str },
    #[error("plugin name {name:?} cannot be uploaded: a name holds letters, digits, '-', '_' and '.' only, and does not start with '.'; give another with --name")]
    BadName { name: String },
    #[error("cannot reach the admin server at {url}: {error}; is the host running, and is this its admin.bind?")]
    Unreachable { url: String, error: ureq::Error },
    #[error("the admin server at {url} sent an answer that is not HTTP ({problem}); is this its admin.bind?")]
    BadAnswer { url: String, problem: String },
}

/// Where the admin server is: `host:port` and the path prefix (usually empty).
#[derive(Debug, PartialEq, Eq)]
pub struct AdminUrl {
    pub authority: String,
    pub prefix: String,
}

/// `http://host:port[/prefix]`, or `host:port`. HTTPS is refused with the way round it: this
/// command speaks plain HTTP only (its client is built without TLS), while an admin server with
/// `admin.tls_cert` speaks HTTPS only.
pub fn parse_url(url: &str) -> Result<AdminUrl, DeployError> {
    let bad = |problem| DeployError::BadUrl {
        url: url.to_owned(),
        problem,
    };
    if url.starts_with("https://") {
        return Err(bad("is https, which `cojoin plugin deploy` does not speak: upload to an HTTPS admin API with `curl -T <wasm> --cacert <ca.pem> https://host:port/plugins?name=<name>` (README, admin.tls_cert), or"));
    }
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if rest.contains("://") {
        return Err(bad("has a scheme other than http"));
    }
    let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() || !authority.contains(':') {
        return Err(bad("has no host:port"));
    }
    Ok(AdminUrl {
        authority: authority.to_owned(),
        prefix: prefix.trim_end_matches('/').to_owned(),
    })
}

/// Where the upload of `name` goes. The name is checked first: the host takes a plain file name
/// only, and it is part of the URL.
pub fn upload_url(url: &AdminUrl, name: &str) -> Result<String, DeployError> {
    let plain = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !plain {
        return Err(DeployError::BadName {
            name: name.to_owned(),
        });
    }
    Ok(format!(
        "http://{}{}/plugins/{name}.wasm",
        url.authority, url.prefix
    ))
}

/// An answer: status and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// What the host answered an upload, for the command line to print.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// 2xx: the version now live, as `GET /plugins` shows it (plus `persisted`).
    Live(serde_json::Value),
    /// 422: the host validated the upload and kept its running version; the reply's `error`.
    Refused { error: String, running: String },
    /// Any other status (401 wrong token, 413 too large, …), with the server's text.
    Failed { status: u16, body: String },
}

impl Outcome {
    pub fn from_answer(answer: Answer) -> Outcome {
        let json: Option<serde_json::Value> = serde_json::from_str(&answer.body).ok();
        let field = |name: &str| {
            json.as_ref()
                .and_then(|j| j[name].as_str())
                .map(str::to_owned)
        };
        match answer.status {
            200..=299 => Outcome::Live(json.unwrap_or_default()),
            422 => Outcome::Refused {
                error: field("error").unwrap_or_else(|| answer.body.trim().to_owned()),
                running: field("running").unwrap_or_default(),
            },
            status => Outcome::Failed {
                status,
                body: field("error").unwrap_or_else(|| answer.body.trim().to_owned()),
            },
        }
    }
}

/// Uploads `component` as `name` to the admin server at `url`.
pub fn deploy(
    url: &str,
    token: Option<&str>,
    name: &str,
    component: &[u8],
) -> Result<Outcome, DeployError> {
    let target = upload_url(&parse_url(url)?, name)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        // A refusal (401, 413, 422) is an answer to read, not an error.
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(ANSWER_TIMEOUT))
        .build()
        .into();
    let mut request = agent
        .put(&target)
        .header("Content-Type", "application/wasm")
        .header("Expect", "100-continue");
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {}", token.trim()));
    }
    let failed = |error: ureq::Error| match error {
        ureq::Error::Protocol(e) => DeployError::BadAnswer {
            url: url.to_owned(),
            problem: e.to_string(),
        },
        error => DeployError::Unreachable {
            url: url.to_owned(),
            error,
        },
    };
    let mut response = request.send(component).map_err(failed)?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().map_err(failed)?;
    Ok(Outcome::from_answer(Answer { status, body }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_http_host_port_with_an_optional_prefix() {
        let u = parse_url("http://127.0.0.1:9464/").unwrap();
        assert_eq!(u.authority, "127.0.0.1:9464");
        assert_eq!(u.prefix, "");
        assert_eq!(
            parse_url("localhost:9464").unwrap().authority,
            "localhost:9464"
        );
        assert_eq!(parse_url("http://h:1/admin").unwrap().prefix, "/admin");
        for bad in ["https://h:1", "ftp://h:1", "http://", "http://host"] {
            let err = parse_url(bad).unwrap_err().to_string();
            assert!(err.contains("e.g. http://127.0.0.1:9464"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_upload_goes_to_its_name_which_must_be_a_plain_file_name() {
        let u = parse_url("http://h:1/admin").unwrap();
        assert_eq!(
            upload_url(&u, "fraud_v2").unwrap(),
            "http://h:1/admin/plugins/fraud_v2.wasm"
        );
        for bad in ["", ".hidden", "a/b", "a b", "é"] {
            let err = upload_url(&u, bad).unwrap_err().to_string();
            assert!(err.contains("give another with --name"), "{bad}: {err}");
        }
    }

    #[test]
    fn answers_become_live_refused_or_failed() {
        let answer = |status, body: &str| {
            Outcome::from_answer(Answer {
                status,
                body: body.to_owned(),
            })
        };
        let live = answer(200, "{\"name\":\"fraud\",\"generation\":2}");
        assert_eq!(
            live,
            Outcome::Live(serde_json::json!({"name": "fraud", "generation": 2}))
        );
        assert_eq!(
            answer(
                422,
                "{\"error\":\"init failed: boom\",\"upload\":\"fraud\",\"running\":\"old@abc\"}"
            ),
            Outcome::Refused {
                error: "init failed: boom".into(),
                running: "old@abc".into()
            }
        );
        assert_eq!(
            answer(401, "missing or wrong bearer token\n"),
            Outcome::Failed {
                status: 401,
                body: "missing or wrong bearer token".into()
            }
        );
    }
}
