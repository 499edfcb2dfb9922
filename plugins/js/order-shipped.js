// The "order shipped" action of a three-topic join, in JavaScript (world plugin-n). Topics, in
// join.topics order: orders, payments, shipments. Same records as the Rust version
// (plugins/rust/order-shipped), with "by": "js".
//
// Build: componentize-js order-shipped.js --wit ../../wit --world-name plugin-n -d http \
//          -d fetch-event -o order_shipped_js.wasm
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
  log('info', `order-shipped (js) ready, ${config.length} config entries`);
}

export function onMatchN(key, events) {
  if (events.length !== 3) throw `a three-topic join gives 3 events, not ${events.length}`;
  const [order, payment, shipment] = events;
  return [record(key, {
    order_id: decoder.decode(key),
    status: 'shipped',
    order: valueJson(order),
    payment: valueJson(payment),
    shipment: valueJson(shipment),
    shipped_at: Number(shipment.timestamp),
    by: 'js',
  })];
}

export function onExpireN(key, order, partners) {
  const payments = partners.length > 0 ? partners[0].length : 0;
  const shipments = partners.length > 1 ? partners[1].length : 0;
  return [record(key, {
    order_id: decoder.decode(key),
    status: payments === 0 ? 'unpaid' : 'not-shipped',
    order: valueJson(order),
    payments,
    shipments,
    by: 'js',
  })];
}

// One result per call: its records, or the string it threw. Anything else thrown fails the whole
// batch, and the host then makes the calls one by one.
export function onBatchN(calls) {
  return calls.map((call) => {
    const args = call.val;
    try {
      const val = call.tag === 'on-match-n'
        ? onMatchN(args.key, args.events)
        : onExpireN(args.key, args.event, args.partners);
      return { tag: 'ok', val };
    } catch (e) {
      if (typeof e !== 'string') throw e;
      return { tag: 'err', val: e };
    }
  });
}
