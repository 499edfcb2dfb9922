// {{name}}: a cojoin join action over several topics, in JavaScript (componentize-js, world
// plugin-n).
//
// cojoin calls onMatchN with one event of each topic in join.topics (cojoin.toml), in that order,
// for every combination of events with the same key whose timestamps lie within the join window
// of each other; and, in a left join, onExpireN for an event of the first topic that took part in
// no match by the time its window closed, with the partners it did find (one array per later
// topic). Each returns the records to produce; throwing a string fails the call: the host retries
// it, then dead-letters its inputs. `cojoin plugin build` adds onBatchN, which hands the host's
// batches of calls to these two.
//
// Keys and values are Uint8Array, timestamps and offsets BigInt, an absent option undefined.
// This skeleton produces, to the output topic:
// - a match: {"key", "status": "matched", "events": [each topic's value], "at"}
// - an expired event: {"key", "status": "unmatched", "value", "partners": [events per later topic]}
//
// Check: node --test    Build: cojoin plugin build    Replay: cojoin plugin test
//
// console.log lines go to the host's log. (The host's leveled `log` is
// `import { log } from 'cojoin:plugin/host@0.1.0'`, which only exists inside the component, so
// node --test could no longer load this file.)

const decoder = new TextDecoder();
const encoder = new TextEncoder();

// The event's value: parsed when it is JSON, else text; null for a tombstone.
function valueJson(event) {
  if (event.value === undefined || event.value === null) return null;
  const text = decoder.decode(event.value);
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// A record to the host's output topic (topic: undefined).
function record(key, body) {
  return { topic: undefined, key, value: encoder.encode(JSON.stringify(body)), headers: [] };
}

export function init(config) {
  console.log(`{{name}} ready, ${config.length} config entries`);
}

export function onMatchN(key, events) {
  const at = events.reduce((max, e) => (e.timestamp > max ? e.timestamp : max), events[0].timestamp);
  return [record(key, {
    key: decoder.decode(key),
    status: 'matched',
    events: events.map(valueJson),
    at: Number(at),
  })];
}

export function onExpireN(key, event, partners) {
  return [record(key, {
    key: decoder.decode(key),
    status: 'unmatched',
    value: valueJson(event),
    partners: partners.map((found) => found.length),
  })];
}
