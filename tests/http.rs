//! A minimal HTTP/1.1 client for the admin server: one request per connection, `Connection: close`,
//! enough for `GET /metrics` and `PUT /plugins` without pulling an HTTP stack into the tests.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// Status and body of one response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// `method` on `url` (`http://host:port/path`) with `body`; panics on I/O errors and timeouts.
pub fn request(method: &str, url: &str, body: &[u8]) -> Response {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream =
        TcpStream::connect(authority).unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("reading the answer of {method} {url}: {e}"));
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    Response {
        status,
        body: body.to_owned(),
    }
}

pub fn get(url: &str) -> Response {
    request("GET", url, b"")
}

/// The value of the sample `name` (with its labels, e.g. `cojoin_records_consumed_total{topic="orders"}`)
/// in a Prometheus text page.
pub fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
