// {{name}}: a cojoin join action, in JavaScript (componentize-js).
//
// cojoin calls onMatch for every pair of events with the same key within the join window (a from
// join.left, b from join.right in cojoin.toml), and onExpire for an event whose window closed with
// no partner (left and outer joins). Each returns the records to produce; throwing a string fails
// the call: the host retries it, then dead-letters its inputs.
//
// Keys and values are Uint8Array, timestamps and offsets BigInt, an absent option undefined.
// This skeleton produces, to the output topic:
// - a match: {"key", "status": "matched", "left", "right", "at"}
// - an expired event: {"key", "status": "unmatched", "side", "value"}
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

export function onMatch(key, a, b) {
  return [record(key, {
    key: decoder.decode(key),
    status: 'matched',
    left: valueJson(a),
    right: valueJson(b),
    at: Number(a.timestamp > b.timestamp ? a.timestamp : b.timestamp),
  })];
}

export function onExpire(key, event, side) {
  return [record(key, {
    key: decoder.decode(key),
    status: 'unmatched',
    side,
    value: valueJson(event),
  })];
}
