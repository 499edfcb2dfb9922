// Unit tests of the action under Node (node --test), with events shaped as the component gets them.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { onMatchN, onExpireN } from '../plugin.js';

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

test("a match gives one record with every topic's value in order", () => {
  const events = [
    event('orders', 'order-1', { amount: 20 }),
    event('payments', 'order-1', { method: 'card' }, 1764680405000n),
    event('shipments', 'order-1', { carrier: 'post' }, 1764680403000n),
  ];
  assert.deepEqual(body(onMatchN(encoder.encode('order-1'), events)), {
    key: 'order-1',
    status: 'matched',
    events: [{ amount: 20 }, { method: 'card' }, { carrier: 'post' }],
    at: 1764680405000,
  });
});

test('an event left without a match is reported with the partners it found', () => {
  const order = event('orders', 'order-3', { amount: 5 });
  const paid = [event('payments', 'order-3', { method: 'cash' })];
  assert.deepEqual(body(onExpireN(encoder.encode('order-3'), order, [paid, []])), {
    key: 'order-3', status: 'unmatched', value: { amount: 5 }, partners: [1, 0],
  });
});

test('a value that is not JSON is passed as text and a tombstone as null', () => {
  const key = encoder.encode('p');
  assert.equal(body(onExpireN(key, event('orders', 'p', 'not json'), [[], []])).value, 'not json');
  assert.equal(body(onExpireN(key, event('orders', 'p', undefined), [[], []])).value, null);
});
