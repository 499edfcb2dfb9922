//! The tests' client for the admin server: ureq, blocking, one fresh connection a request (no
//! state carried between a test's calls), enough for `GET /metrics` and `PUT /plugins`.

use std::time::Duration;

/// Status and body of one response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// An upload is compiled before it is answered: a large component takes tens of seconds on a
/// small machine.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// `method` on `url` (`http://host:port/path`) with `body`; panics on I/O errors and timeouts.
pub fn request(method: &str, url: &str, body: &[u8]) -> Response {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        // A 4xx or 5xx is an answer the test checks, not an error.
        .http_status_as_error(false)
        .timeout_global(Some(ANSWER_TIMEOUT))
        .build()
        .into();
    let request = ureq::http::Request::builder().method(method).uri(url);
    // No body at all rather than an empty one: a GET goes without a Content-Length.
    let sent = match body {
        [] => agent.run(request.body(()).expect("a method and a URL")),
        body => agent.run(request.body(body).expect("a method and a URL")),
    };
    let mut response = sent.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .unwrap_or_else(|e| panic!("reading the answer of {method} {url}: {e}"));
    Response { status, body }
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
