//! One request and its answer, once hyper has read its head: `/healthz` and the GETs answered at
//! once; an upload (`PUT`) refused on its head, or admitted ([`admit`]: a length this host
//! takes), its body received under the limits ([`crate::admin::body`]) and only then handed to
//! the upload pool. What to do with a head is decided by pure functions, tested here; the rest
//! moves bytes.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use hyper::{Method, Response, StatusCode};

use super::Limits;
use crate::admin::body::{self, Refusal, Size, UploadBudget};
use crate::admin::{Reply, Request};

/// A response's body: a [`Reply`]'s text, whole.
pub(super) type Body = Full<Bytes>;

/// How long a refused upload's body is still read and thrown away, so that the client, still
/// sending it, reads the refusal instead of a reset connection.
const DRAIN: Duration = Duration::from_secs(5);

/// What every connection shares: the limits, the routes, the liveness probe and the upload
/// budget.
pub(super) struct Served<F, H> {
    pub limits: Limits,
    pub routes: F,
    pub healthz: H,
    pub budget: UploadBudget,
}

/// What the server reads of a request's head.
#[derive(Debug, PartialEq)]
pub(super) struct Head {
    method: Method,
    /// Path and query.
    target: String,
    authorization: Option<String>,
    content_length: Option<u64>,
    chunked: bool,
    /// `Expect: 100-continue`: the client sends no body until hyper says "100 Continue", which it
    /// does when the body is first read.
    expects_continue: bool,
}

impl Head {
    fn of<B>(request: &hyper::Request<B>) -> Head {
        let headers = request.headers();
        let text = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        Head {
            method: request.method().clone(),
            target: request.uri().path_and_query().map_or_else(
                || request.uri().path().to_owned(),
                |p| p.as_str().to_owned(),
            ),
            authorization: text(AUTHORIZATION).map(str::to_owned),
            // hyper has refused a malformed one (400) before the request gets here.
            content_length: text(CONTENT_LENGTH).and_then(|v| v.trim().parse().ok()),
            chunked: headers
                .get_all(hyper::header::TRANSFER_ENCODING)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.to_ascii_lowercase().contains("chunked")),
            expects_continue: text(EXPECT).is_some_and(|v| v.eq_ignore_ascii_case("100-continue")),
        }
    }

    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    fn is_healthz(&self) -> bool {
        self.path() == "/healthz" && matches!(self.method, Method::GET | Method::HEAD)
    }

    fn request(&self, body: Result<Vec<u8>, Refusal>) -> Request<'_> {
        Request {
            method: self.method.as_str(),
            target: &self.target,
            authorization: self.authorization.as_deref(),
            body,
        }
    }
}

/// Whether an upload's body may be read, and how long it says it is: 411 without a
/// Content-Length or chunked encoding (a body with neither is empty: a client that meant to send
/// one is told how), 413 past `max_body` before a byte of it is read.
pub(super) fn admit(head: &Head, max_body: u64) -> Result<Size, Refusal> {
    match (head.content_length, head.chunked) {
        (Some(length), _) if length > max_body => Err((
            413,
            format!(
                "the upload ({}) is larger than the {} this host accepts",
                body::size(length),
                body::size(max_body)
            ),
        )),
        // hyper takes a chunked body over a Content-Length that comes with it (RFC 9112 6.3).
        (_, true) => Ok(Size::Chunked),
        (Some(length), false) => Ok(Size::Exact(length)),
        (None, false) => Err((
            411,
            "send the body with a Content-Length or chunked (e.g. curl -T plugin.wasm)".to_owned(),
        )),
    }
}

/// The answer to one request on a connection within the cap.
pub(super) async fn answer<F, H>(
    request: hyper::Request<Incoming>,
    served: Arc<Served<F, H>>,
) -> Response<Body>
where
    F: super::Routes,
    H: Fn() -> Reply + Send + Sync + 'static,
{
    let head = Head::of(&request);
    if head.is_healthz() {
        return response((served.healthz)());
    }
    if head.method != Method::PUT {
        // Reads of shared state: quick, answered here. A body they came with is not read.
        return response(served.routes.answer(head.request(Ok(Vec::new()))));
    }
    upload(request.into_body(), head, served).await
}

/// A `PUT`: refused on its head, or its body received here (holding its share of the budget)
/// and only then answered on the blocking pool, where it is compiled and swapped in.
async fn upload<F, H>(mut body: Incoming, head: Head, served: Arc<Served<F, H>>) -> Response<Body>
where
    F: super::Routes,
    H: Fn() -> Reply + Send + Sync + 'static,
{
    let refused = |refusal: Refusal| served.routes.answer(head.request(Err(refusal)));
    let authorization = head.authorization.as_deref();
    if let Some(reply) = served
        .routes
        .refuse_before_body(&head.target, authorization)
    {
        discard(body, &head, false, reply.status);
        return response(reply);
    }
    let limits = &served.limits;
    let declared = match admit(&head, limits.max_body) {
        Ok(declared) => declared,
        Err(refusal) => {
            let reply = refused(refusal);
            discard(body, &head, false, reply.status);
            return response(reply);
        }
    };
    let reserve = match declared {
        Size::Exact(length) => length,
        Size::Chunked => 0,
    };
    let mut room = match served.budget.reserve(reserve, limits.budget_wait).await {
        Ok(room) => room,
        Err(refusal) => {
            let reply = refused(refusal);
            discard(body, &head, false, reply.status);
            return response(reply);
        }
    };
    let bytes = match body::read(&mut body, declared, &mut room, &served.budget, limits).await {
        Ok(bytes) => bytes,
        Err(refusal) => {
            let reply = refused(refusal);
            discard(body, &head, true, reply.status);
            return response(reply);
        }
    };
    let answering = served.clone();
    let answered = tokio::task::spawn_blocking(move || {
        let reply = answering.routes.answer(head.request(Ok(bytes)));
        // The body's share of the budget comes back once the upload is answered: until then
        // its bytes are still held.
        drop(room);
        reply
    })
    .await;
    match answered {
        Ok(reply) => response(reply),
        Err(e) => {
            tracing::error!("admin server: an upload handler failed: {e}");
            response(Reply::text(
                500,
                "the upload's handler failed (see the host's log)\n",
            ))
        }
    }
}

/// The body of a refused upload: left unread when the client waits for `100 Continue` before
/// sending it (so it never does) or sends it too slowly to matter (408); otherwise read and
/// thrown away for up to [`DRAIN`], so that the client finishes sending and reads the refusal
/// rather than a connection reset under its feet.
fn discard(mut body: Incoming, head: &Head, polled: bool, status: u16) {
    let unsent = head.expects_continue && !polled;
    if unsent || status == 408 || body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let drain = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(DRAIN, drain).await;
    });
}

/// The one request of a connection past the cap: `/healthz`, or 503.
pub(super) fn overflow<B, F, H>(request: &hyper::Request<B>, served: &Served<F, H>) -> Reply
where
    H: Fn() -> Reply,
{
    if Head::of(request).is_healthz() {
        return (served.healthz)();
    }
    Reply::text(
        503,
        format!(
            "too many admin connections (more than {}); try again\n",
            served.limits.max_connections
        ),
    )
}

/// A [`Reply`] as hyper sends it (which leaves out the body of an answer to `HEAD`, and keeps
/// the connection open unless the client asked otherwise).
pub(super) fn response(reply: Reply) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> Head {
        let mut request = hyper::Request::builder()
            .method("PUT")
            .uri("/plugins/a.wasm?x=1");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Head::of(&request.body(()).unwrap())
    }

    #[test]
    fn a_head_is_read_from_its_headers() {
        let h = head(&[
            ("authorization", "Bearer t"),
            ("content-length", "42"),
            ("expect", "100-Continue"),
        ]);
        assert_eq!(h.target, "/plugins/a.wasm?x=1");
        assert_eq!(h.path(), "/plugins/a.wasm");
        assert_eq!(h.authorization.as_deref(), Some("Bearer t"));
        assert_eq!(h.content_length, Some(42));
        assert!(h.expects_continue && !h.chunked);
        assert!(head(&[("transfer-encoding", "gzip, chunked")]).chunked);
    }

    #[test]
    fn an_upload_needs_a_length_or_chunks_and_no_more_than_the_limit() {
        assert_eq!(
            admit(&head(&[("content-length", "10")]), 10),
            Ok(Size::Exact(10))
        );
        assert_eq!(
            admit(&head(&[("transfer-encoding", "chunked")]), 10),
            Ok(Size::Chunked)
        );
        let (status, why) = admit(&head(&[("content-length", "11")]), 10).unwrap_err();
        assert_eq!(status, 413);
        assert!(
            why.contains("11 bytes") && why.contains("10 bytes"),
            "{why}"
        );
        let (status, why) = admit(&head(&[]), 10).unwrap_err();
        assert_eq!(status, 411);
        assert!(why.contains("curl -T"), "{why}");
    }

    #[test]
    fn replies_keep_their_status_and_content_type() {
        let r = response(Reply::text(413, "too large"));
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/plain; charset=utf-8");
    }
}
