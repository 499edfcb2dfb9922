// The "order paid" action, in JavaScript (jco / componentize-js). Left topic: orders; right topic:
// payments. Same records as the Rust version (plugins/rust/order-paid), with "by": "js".
//
// Build: jco componentize order-paid.js --wit ../../wit --world-name plugin -d http -d fetch-event \
//          -o order_paid_js.wasm
// A function returning result<_, string> returns its ok value; throwing a string makes it an err.

import { log } from 'cojoin:plugin/host@0.1.0';

const decoder = new TextDecoder();
const encoder = new TextEncoder();

function valueJson(event) {
  if (event.value === undefined || event.value === null) return null;
  const text = decoder.decode(event.value);
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function record(key, body) {
  return { topic: undefined, key, value: encoder.encode(JSON.stringify(body)), headers: [] };
}

export function init(config) {
  log('info', `order-paid (js) ready, ${config.length} config entries`);
}

export function onMatch(key, a, b) {
  return [record(key, {
    order_id: decoder.decode(key),
    status: 'paid',
    order: valueJson(a),
    payment: valueJson(b),
    paid_at: Number(b.timestamp),
    by: 'js',
  })];
}

export function onExpire(key, event, side) {
  const orderId = decoder.decode(key);
  const body = side === 'left'
    ? { order_id: orderId, status: 'unpaid', order: valueJson(event), by: 'js' }
    : { order_id: orderId, status: 'payment-without-order', payment: valueJson(event), by: 'js' };
  return [record(key, body)];
}
