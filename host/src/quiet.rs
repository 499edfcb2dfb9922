//! Saying a repeated complaint once, then now and then. While a broker is away, librdkafka
//! reports it many times a second from every client of a host — connection refused, all brokers
//! down, broker transport failure — and the consumer's poll returns it as an error too: a probe
//! counted 422 WARN/ERROR lines in 25 s of an outage. Each kind of complaint is logged when it
//! first comes, then at most once per [`REPEAT`], saying how many were held back; the metrics
//! still count every one. (kafka/quiet.rs routes librdkafka's own lines through here.)

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often a complaint of one kind is said again while it goes on.
pub const REPEAT: Duration = Duration::from_secs(30);

/// When each kind was last said, and how many of it were held back since.
#[derive(Default)]
pub struct Repeats {
    kinds: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Repeats {
    /// Whether a complaint of `kind` is said at `now`: `Some(held back since the last one said)`,
    /// or `None` (held back, counted).
    pub fn say(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        match kinds.get_mut(kind) {
            Some((said, held)) if now.duration_since(*said) < REPEAT => {
                *held += 1;
                None
            }
            Some((said, held)) => {
                *said = now;
                Some(std::mem::take(held))
            }
            None => {
                kinds.insert(kind.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}

/// The host's: every Kafka client of the process shares it.
fn repeats() -> &'static Repeats {
    static REPEATS: OnceLock<Repeats> = OnceLock::new();
    REPEATS.get_or_init(Repeats::default)
}

/// Whether to say a complaint of `kind` now ([`Repeats::say`] on the host's record).
fn say(kind: &str) -> Option<u64> {
    repeats().say(kind, Instant::now())
}

/// `message` (made only when said) with how many like it were held back, if a complaint of
/// `kind` is said now ([`say`] and [`with_held`] together).
pub fn said(kind: &str, message: impl FnOnce() -> String) -> Option<String> {
    say(kind).map(|held| with_held(&message(), held))
}

/// `message`, and how many like it were held back before it.
fn with_held(message: &str, held: u64) -> String {
    if held == 0 {
        message.to_owned()
    } else {
        format!(
            "{message} ({held} more like it in the last {} s not logged)",
            REPEAT.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_said_first_then_once_per_repeat_with_what_was_held_back() {
        let repeats = Repeats::default();
        let t = Instant::now();
        assert_eq!(repeats.say("error AllBrokersDown", t), Some(0));
        for ms in [1, 500, 29_000] {
            assert_eq!(
                repeats.say("error AllBrokersDown", t + Duration::from_millis(ms)),
                None
            );
        }
        // Another kind is its own.
        assert_eq!(repeats.say("log FAIL", t + Duration::from_secs(1)), Some(0));
        assert_eq!(repeats.say("error AllBrokersDown", t + REPEAT), Some(3));
        assert_eq!(
            repeats.say("error AllBrokersDown", t + REPEAT + Duration::from_secs(1)),
            None
        );
        assert_eq!(repeats.say("error AllBrokersDown", t + 3 * REPEAT), Some(1));
    }

    #[test]
    fn what_was_held_back_is_said_with_the_next_one() {
        assert_eq!(with_held("down", 0), "down");
        assert_eq!(
            with_held("down", 4),
            "down (4 more like it in the last 30 s not logged)"
        );
    }
}
