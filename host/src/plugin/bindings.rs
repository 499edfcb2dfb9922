//! Generated bindings for the `cojoin:plugin` world, and the conversions between them and the
//! host's own [`event`](crate::event) types. Kept private: the rest of the crate sees only the names
//! re-exported here.

use crate::event;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

/// The `plugin-n` world (joins of three topics or more), sharing the `plugin` world's types.
pub(crate) mod multi {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin-n",
        with: {
            "cojoin:plugin/types": super::cojoin::plugin::types,
            "cojoin:plugin/host": super::cojoin::plugin::host,
        },
    });
}

/// The export that tells a `plugin-n` component from a `plugin` one.
pub(crate) const ON_MATCH_N: &str = "on-match-n";

pub(crate) use self::cojoin::plugin::host;
pub(crate) use self::cojoin::plugin::types as wit;
pub(crate) use self::Plugin as PluginBindings;
pub(crate) use self::PluginIndices as PluginBindingsIndices;

/// The export of the `plugin-batched` world, looked up by name: the world `plugin` is the one
/// every component must have, and `on-batch` is used when it is there.
pub(crate) const ON_BATCH: &str = "on-batch";

/// `on-batch`'s parameters and results, as [`Func::typed`](wasmtime::component::Func::typed)
/// checks them once per instance.
pub(crate) type OnBatchParams<'a> = (&'a [wit::Call],);
pub(crate) type OnBatchResults = (Vec<wit::Outcome>,);

/// A batch's calls as the guest takes them, copied into `dst`, whose buffers are reused (as by
/// [`fill_event`]).
pub(crate) fn fill_calls(dst: &mut Vec<wit::Call>, src: &[event::Call<'_>]) {
    dst.truncate(src.len());
    for (i, call) in src.iter().enumerate() {
        let fits = matches!(
            (dst.get(i), call),
            (Some(wit::Call::OnMatch(_)), event::Call::Match { .. })
                | (Some(wit::Call::OnExpire(_)), event::Call::Expire { .. })
        );
        assert!(
            !matches!(
                call,
                event::Call::MatchN { .. } | event::Call::ExpireN { .. }
            ),
            "an N-way call goes to on-batch-n (fill_calls_n)"
        );
        if !fits {
            let fresh = match call {
                event::Call::Match { .. } => wit::Call::OnMatch(wit::Matched {
                    key: Vec::new(),
                    a: empty_event(),
                    b: empty_event(),
                }),
                event::Call::Expire { .. } => wit::Call::OnExpire(wit::Expired {
                    key: Vec::new(),
                    event: empty_event(),
                    side: wit::Side::Left,
                }),
                event::Call::MatchN { .. } | event::Call::ExpireN { .. } => {
                    unreachable!("asserted above")
                }
            };
            match dst.get_mut(i) {
                Some(slot) => *slot = fresh,
                None => dst.push(fresh),
            }
        }
        match (&mut dst[i], *call) {
            (wit::Call::OnMatch(m), event::Call::Match { key, left, right }) => {
                m.key.clear();
                m.key.extend_from_slice(key);
                fill_event(&mut m.a, left);
                fill_event(&mut m.b, right);
            }
            (
                wit::Call::OnExpire(x),
                event::Call::Expire {
                    key,
                    event,
                    side: s,
                },
            ) => {
                x.key.clear();
                x.key.extend_from_slice(key);
                fill_event(&mut x.event, event);
                x.side = side(s);
            }
            _ => unreachable!("the slot was made to fit above"),
        }
    }
}

/// An N-way batch's calls as the guest takes them (`on-batch-n`).
pub(crate) fn calls_n(src: &[event::Call<'_>]) -> Vec<wit::CallN> {
    src.iter()
        .map(|call| match *call {
            event::Call::MatchN { key, events } => wit::CallN::OnMatchN(wit::MatchedN {
                key: key.to_vec(),
                events: events_of(events),
            }),
            event::Call::ExpireN {
                key,
                event,
                partners,
            } => wit::CallN::OnExpireN(wit::ExpiredN {
                key: key.to_vec(),
                event: event_of(event),
                partners: partners.iter().map(|p| events_of(p)).collect(),
            }),
            event::Call::Match { .. } | event::Call::Expire { .. } => {
                unreachable!("a two-topic call goes to on-batch (fill_calls)")
            }
        })
        .collect()
}

/// An event as the guest takes it, in a fresh buffer.
pub(crate) fn event_of(src: &event::Event) -> wit::Event {
    let mut dst = empty_event();
    fill_event(&mut dst, src);
    dst
}

pub(crate) fn events_of(src: &[std::sync::Arc<event::Event>]) -> Vec<wit::Event> {
    src.iter().map(|e| event_of(e)).collect()
}

/// Copies `src` into `dst`, reusing `dst`'s buffers, so that a worker calling the plugin over and
/// over allocates nothing for its inputs once the buffers have grown to size.
pub(crate) fn fill_event(dst: &mut wit::Event, src: &event::Event) {
    dst.topic.clear();
    dst.topic.push_str(&src.topic);
    dst.partition = src.partition;
    dst.offset = src.offset;
    dst.timestamp = src.timestamp;
    dst.key.clear();
    dst.key.extend_from_slice(src.key_bytes());
    match (&mut dst.value, &src.value) {
        (Some(d), Some(s)) => {
            d.clear();
            d.extend_from_slice(s);
        }
        (d, s) => *d = s.as_deref().map(<[u8]>::to_vec),
    }
    dst.headers.truncate(src.headers.len());
    for (i, h) in src.headers.iter().enumerate() {
        match dst.headers.get_mut(i) {
            Some(d) => {
                d.key.clear();
                d.key.push_str(&h.key);
                d.value.clone_from(&h.value);
            }
            None => dst.headers.push(wit::Header {
                key: h.key.clone(),
                value: h.value.clone(),
            }),
        }
    }
}

pub(crate) fn empty_event() -> wit::Event {
    wit::Event {
        topic: String::new(),
        partition: 0,
        offset: 0,
        timestamp: 0,
        key: Vec::new(),
        value: None,
        headers: Vec::new(),
    }
}

pub(crate) fn side(side: event::Side) -> wit::Side {
    // The `plugin` world's calls are a two-topic join's: its first topic is the left.
    if side == event::Side::LEFT {
        wit::Side::Left
    } else {
        wit::Side::Right
    }
}

/// Moves the plugin's records into host types without copying their bytes.
pub(crate) fn outputs(records: Vec<wit::OutputRecord>) -> Vec<event::OutputRecord> {
    records
        .into_iter()
        .map(|r| event::OutputRecord {
            topic: r.topic,
            key: r.key,
            value: r.value,
            headers: r
                .headers
                .into_iter()
                .map(|h| event::Header {
                    key: h.key,
                    value: h.value,
                })
                .collect(),
        })
        .collect()
}
