//! An upload's body on its way in: room for it in the byte budget all uploads share, then its
//! bytes, which must keep coming. Both run on the admin thread, not the upload pool: a body
//! still arriving holds no pool thread (issue 29: four clients trickling their bodies held all
//! four for 120 s), and the budget keeps concurrent uploads to about one `max_body` of memory
//! (four 500 MB uploads took 1.9 GB). Depends on tokio and the server's `Limits` only;
//! [`super::server`] wires it in.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout, timeout_at, Instant};

use super::server::Limits;

/// A refusal: HTTP status and the reason given to the client.
pub type Refusal = (u16, String);

/// Bytes of bodies held at once, one permit a byte. tokio's semaphore serves waiters in order,
/// so a large upload that waits is not overtaken forever by small ones.
pub struct UploadBudget {
    permits: Arc<Semaphore>,
    total: u32,
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

    /// Room for a body of `length` bytes, held until the permit drops (once the upload is
    /// answered). Waits up to `wait` for other uploads to finish, then refuses with 503.
    pub async fn reserve(
        &self,
        length: u64,
        wait: Duration,
    ) -> Result<OwnedSemaphorePermit, Refusal> {
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
            Ok(Ok(permit)) => Ok(permit),
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

/// Reads `length` body bytes (the first ones may already be in `start`). The body must arrive
/// within `limits.body_timeout`, and after `limits.body_grace` at `limits.min_body_rate` on
/// average: a client that trickles its body cannot keep its share of the budget for long.
pub async fn read<R: AsyncRead + Unpin>(
    stream: &mut R,
    start: Vec<u8>,
    length: u64,
    limits: &Limits,
) -> Result<Vec<u8>, Refusal> {
    let started = Instant::now();
    let deadline = started + limits.body_timeout;
    // The whole length at once: the budget has room for it, and growing by doubling would
    // briefly take up to twice as much.
    let mut body = Vec::with_capacity(length as usize);
    body.extend_from_slice(&start[..start.len().min(length as usize)]);
    let mut chunk = vec![0; 64 * 1024];
    while (body.len() as u64) < length {
        // Each byte that arrives buys 1/min_body_rate s more; the grace covers a slow start.
        let earned =
            Duration::from_secs_f64(body.len() as f64 / limits.min_body_rate.max(1) as f64);
        let keep_up = started + limits.body_grace + earned;
        let want = chunk.len().min((length - body.len() as u64) as usize);
        match timeout_at(keep_up.min(deadline), stream.read(&mut chunk[..want])).await {
            Err(_) if keep_up < deadline => {
                return Err((
                    408,
                    format!(
                        "the upload arrived too slowly: {} of {length} bytes in {:.1} s, below the {}/s this host requires after the first {} s; send it over a faster link or from closer to the host",
                        body.len(),
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
                        "the upload did not arrive within {} s ({} of {length} bytes)",
                        limits.body_timeout.as_secs_f64(),
                        body.len()
                    ),
                ))
            }
            Ok(Ok(0)) => {
                return Err((
                    400,
                    format!(
                        "the connection closed after {} of {length} bytes",
                        body.len()
                    ),
                ))
            }
            Ok(Ok(n)) => body.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err((400, format!("reading the upload: {e}"))),
        }
    }
    Ok(body)
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
