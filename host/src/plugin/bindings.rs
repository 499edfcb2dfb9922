//! Generated bindings for the `cojoin:plugin` world, and the conversions between them and the
//! host's own [`event`](crate::event) types. Kept private: the rest of the crate sees only the names
//! re-exported here.

use crate::event;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

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
