// Unit tests of the action under Node (node --test), with events shaped as the component gets them.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { onMatch, onExpire } from '../plugin.js';

const encoder = new TextEncoder();

function event(topic, key, value, timestamp = 1764680400000n) {
  return {
    topic,
    partition: 0,
    offset: 0n,
    timestamp,
    key: encoder.encode(key),
    value: value === undefined ? undefined : encoder.encode(typeof value === 'string' ? value : JSON.stringify(value)),
    headers: [],
  };
}

function body(records) {
  assert.equal(records.length, 1);
  assert.equal(records[0].topic, undefined, "to the host's output topic");
  return JSON.parse(new TextDecoder().decode(records[0].value));
}

test('a match gives one record with both values', () => {
  const a = event('orders', 'order-1', { amount: 20 });
  const b = event('payments', 'order-1', { method: 'card' }, 1764680405000n);
  const records = onMatch(encoder.encode('order-1'), a, b);
  assert.deepEqual(body(records), {
    key: 'order-1', status: 'matched', left: { amount: 20 }, right: { method: 'card' }, at: 1764680405000,
  });
});

test('an event left alone is reported unmatched with its side', () => {
  const e = event('orders', 'order-2', { amount: 35 });
  assert.deepEqual(body(onExpire(encoder.encode('order-2'), e, 'left')), {
    key: 'order-2', status: 'unmatched', side: 'left', value: { amount: 35 },
  });
});

test('a value that is not JSON is passed as text and a tombstone as null', () => {
  const key = encoder.encode('p');
  assert.equal(body(onExpire(key, event('payments', 'p', 'not json'), 'right')).value, 'not json');
  assert.equal(body(onExpire(key, event('payments', 'p', undefined), 'right')).value, null);
});
