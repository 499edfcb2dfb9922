//! An upload's body on its way in: room for it in the byte budget all uploads share, then its
//! bytes, which must keep coming. Both run on the admin thread, not the upload pool: a body
//! still arriving holds no pool thread (issue 29: four clients trickling their bodies held all
//! four for 120 s), and the budget keeps concurrent uploads to about one `max_body` of memory
//! (four 500 MB uploads took 1.9 GB). A body comes with a Content-Length, whose room is
//! reserved before its first byte is read, or chunked, whose room grows as it arrives, under the
//! same `max_body`. Depends on tokio, `http-body` frames and the server's [`Limits`] only;
//! [`super::server`] wires it in.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper::body::{Body, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout, timeout_at, Instant};

use super::limits::Limits;

/// A refusal: HTTP status and the reason given to the client.
pub type Refusal = (u16, String);

/// How long a body says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// `Content-Length`: its room is reserved whole before the body is read.
    Exact(u64),
    /// `Transfer-Encoding: chunked`: unknown until the last chunk, so its room grows with it.
    Chunked,
}

/// Bytes of bodies held at once, one permit a byte. tokio's semaphore serves waiters in order,
/// so a large upload that waits is not overtaken forever by small ones.
pub struct UploadBudget {
    permits: Arc<Semaphore>,
    total: u32,
}

/// An upload's share of the budget, given back when dropped (once the upload is answered: until
/// then its bytes are still held).
pub struct Room(OwnedSemaphorePermit);

impl Room {
    fn bytes(&self) -> u64 {
        self.0.num_permits() as u64
    }
}

impl UploadBudget {
    /// `bytes` is capped at 4 GiB - 1: a permit request is a `u32`, and an admin host buffers
    /// far less.
    pub fn new(bytes: u64) -> UploadBudget {
        let total = u32::try_from(bytes).unwrap_or(u32::MAX);
        UploadBudget {
            permits: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Room for `length` bytes more. Waits up to `wait` for other uploads to finish, then
    /// refuses with 503.
    pub async fn reserve(&self, length: u64, wait: Duration) -> Result<Room, Refusal> {
        let need = u32::try_from(length)
            .ok()
            .filter(|n| *n <= self.total)
            .ok_or_else(|| {
                (
                    413,
                    format!(
                        "the upload ({}) is larger than the {} this host buffers for uploads",
                        size(length),
                        size(self.total.into())
                    ),
                )
            })?;
        match timeout(wait, self.permits.clone().acquire_many_owned(need)).await {
            Ok(Ok(permit)) => Ok(Room(permit)),
            // Closed: never, the budget lives as long as the server.
            Ok(Err(_)) | Err(_) => {
                let held = self.total as usize - self.permits.available_permits();
                Err((
                    503,
                    format!(
                        "other uploads hold {} of the {} this host buffers at once, and this upload needs {}: retry in a few seconds, once they are done",
                        size(held as u64),
                        size(self.total.into()),
                        size(length)
                    ),
                ))
            }
        }
    }
}

/// Reads a whole body into `room` (reserved for a Content-Length, grown from the budget for a
/// chunked one, never past `limits.max_body`). The body must arrive within
/// `limits.body_timeout`, and after `limits.body_grace` at `limits.min_body_rate` on average: a
/// client that trickles its body cannot keep its share of the budget for long. Time spent
/// waiting for room does not count against the client.
pub async fn read<B>(
    body: &mut B,
    declared: Size,
    room: &mut Room,
    budget: &UploadBudget,
    limits: &Limits,
) -> Result<Vec<u8>, Refusal>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut started = Instant::now();
    let mut deadline = started + limits.body_timeout;
    // A Content-Length's whole room at once: growing by doubling would briefly take up to twice
    // as much.
    let mut bytes = Vec::with_capacity(room.bytes() as usize);
    let of = |received: usize| match declared {
        Size::Exact(length) => format!("{received} of {length} bytes"),
        Size::Chunked => format!("{received} bytes of a chunked body"),
    };
    loop {
        // Each byte that arrives buys 1/min_body_rate s more; the grace covers a slow start.
        let earned =
            Duration::from_secs_f64(bytes.len() as f64 / limits.min_body_rate.max(1) as f64);
        let keep_up = started + limits.body_grace + earned;
        let data = match timeout_at(keep_up.min(deadline), body.frame()).await {
            Err(_) if keep_up < deadline => {
                return Err((
                    408,
                    format!(
                        "the upload arrived too slowly: {} in {:.1} s, below the {}/s this host requires after the first {} s; send it over a faster link or from closer to the host",
                        of(bytes.len()),
                        started.elapsed().as_secs_f64(),
                        size(limits.min_body_rate),
                        limits.body_grace.as_secs_f64()
                    ),
                ))
            }
            Err(_) => {
                return Err((
                    408,
                    format!(
                        "the upload did not arrive within {} s ({})",
                        limits.body_timeout.as_secs_f64(),
                        of(bytes.len())
                    ),
                ))
            }
            Ok(None) => return Ok(bytes),
            // hyper checks the framing: a body shorter than its Content-Length, a connection
            // closed mid-body or a malformed chunk.
            Ok(Some(Err(e))) => {
                return Err((
                    400,
                    format!("reading the upload after {}: {e}", of(bytes.len())),
                ))
            }
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                // Trailers: nothing the admin API reads.
                Err(_) => continue,
            },
        };
        let held = (bytes.len() + data.len()) as u64;
        if held > room.bytes() {
            let waited = Instant::now();
            grow(room, held, budget, limits).await?;
            // The wait was the host's, not the client's.
            started += waited.elapsed();
            deadline += waited.elapsed();
        }
        bytes.extend_from_slice(&data);
    }
}

/// Room for at least `held` bytes of a chunked body: doubled, from 1 MiB, so that a large body
/// asks the budget a few times only; never past `max_body` (413).
async fn grow(
    room: &mut Room,
    held: u64,
    budget: &UploadBudget,
    limits: &Limits,
) -> Result<(), Refusal> {
    if held > limits.max_body {
        return Err((
            413,
            format!(
                "the chunked upload passed the {} this host accepts",
                size(limits.max_body)
            ),
        ));
    }
    let target = held.max(room.bytes() * 2).max(1 << 20).min(limits.max_body);
    let more = budget
        .reserve(target - room.bytes(), limits.budget_wait)
        .await?;
    room.0.merge(more.0);
    Ok(())
}

/// `512 MiB`, `256 KiB`, `500 bytes`: sizes in refusals, in the unit an operator reads.
pub(super) fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_the_largest_whole_unit() {
        assert_eq!(size(512 << 20), "512 MiB");
        assert_eq!(size(3 << 19), "1.5 MiB");
        assert_eq!(size(256 << 10), "256 KiB");
        assert_eq!(size(500), "500 bytes");
        assert_eq!(size(1500), "1500 bytes");
    }
}
