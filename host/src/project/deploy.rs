//! `cojoin plugin deploy`: one `PUT /plugins/<name>.wasm` to a running host's admin server, and
//! its answer: the version now live, or why the host refused it.
//!
//! A plain HTTP/1.1 request on a `TcpStream` (the admin server speaks only that, on loopback by
//! default): the request and the answer's parsing are pure and tested apart from the socket.

use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs};
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
    #[error("cannot reach the admin server at {url}: {error}; is the host running, and is this its admin.bind?")]
    Unreachable { url: String, error: std::io::Error },
    #[error("the admin server at {url} sent an answer that is not HTTP: {answer:?}")]
    BadAnswer { url: String, answer: String },
}

/// Where the admin server is: `host:port` and the path prefix (usually empty).
#[derive(Debug, PartialEq, Eq)]
pub struct AdminUrl {
    pub authority: String,
    pub prefix: String,
}

/// `http://host:port[/prefix]`, or `host:port`. HTTPS is refused: the admin server does not
/// speak it (reach a remote one through a tunnel or a TLS-terminating proxy's http side).
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

/// The head of the upload request.
pub fn request_head(url: &AdminUrl, name: &str, len: usize, token: Option<&str>) -> String {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    format!(
        "PUT {}/plugins/{name}.wasm HTTP/1.1\r\nHost: {}\r\nContent-Type: application/wasm\r\nContent-Length: {len}\r\n{auth}Connection: close\r\n\r\n",
        url.prefix, url.authority
    )
}

/// An answer: status and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Status line and body of a whole `Connection: close` answer.
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut status_line = head.lines().next()?.split_whitespace();
    if !status_line.next()?.starts_with("HTTP/") {
        return None;
    }
    Some(Answer {
        status: status_line.next()?.parse().ok()?,
        body: body.to_owned(),
    })
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
    let admin = parse_url(url)?;
    let unreachable = |error| DeployError::Unreachable {
        url: url.to_owned(),
        error,
    };
    let addr = admin
        .authority
        .to_socket_addrs()
        .map_err(unreachable)?
        .next()
        .ok_or_else(|| unreachable(std::io::ErrorKind::NotFound.into()))?;
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(unreachable)?;
    let head = request_head(&admin, name, component.len(), token);
    stream.write_all(head.as_bytes()).map_err(unreachable)?;
    // A refusal before the body is read (401, 413) closes the connection: its answer is still
    // there to read, so a failed write is not the end.
    let _ = stream.write_all(component);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(unreachable)?;
    let answer = parse_answer(&raw).ok_or_else(|| DeployError::BadAnswer {
        url: url.to_owned(),
        answer: String::from_utf8_lossy(&raw[..raw.len().min(200)]).into_owned(),
    })?;
    Ok(Outcome::from_answer(answer))
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
    fn the_upload_is_named_and_carries_the_token() {
        let u = parse_url("http://h:1").unwrap();
        let head = request_head(&u, "fraud", 42, Some("s3cret"));
        assert!(
            head.starts_with("PUT /plugins/fraud.wasm HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("Content-Length: 42\r\n"));
        assert!(head.contains("Authorization: Bearer s3cret\r\n"));
        assert!(!request_head(&u, "fraud", 1, None).contains("Authorization"));
    }

    #[test]
    fn answers_become_live_refused_or_failed() {
        let answer = |raw: &str| Outcome::from_answer(parse_answer(raw.as_bytes()).unwrap());
        let live = answer("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"name\":\"fraud\",\"generation\":2}");
        assert_eq!(
            live,
            Outcome::Live(serde_json::json!({"name": "fraud", "generation": 2}))
        );
        assert_eq!(
            answer("HTTP/1.1 422 Unprocessable Entity\r\n\r\n{\"error\":\"init failed: boom\",\"upload\":\"fraud\",\"running\":\"old@abc\"}"),
            Outcome::Refused { error: "init failed: boom".into(), running: "old@abc".into() }
        );
        assert_eq!(
            answer("HTTP/1.1 401 Unauthorized\r\n\r\nmissing or wrong bearer token\n"),
            Outcome::Failed {
                status: 401,
                body: "missing or wrong bearer token".into()
            }
        );
        assert_eq!(parse_answer(b"garbage"), None);
    }
}
