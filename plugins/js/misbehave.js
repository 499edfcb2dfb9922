// A test fixture, not an example: how a JavaScript plugin fails. By key: "err:<text>" returns the
// error <text> (throws the string), "crash" throws an Error (a trap); anything else returns one
// record whose value is the key.
const text = new TextDecoder();

function answer(key) {
  const k = text.decode(key);
  if (k.startsWith("err:")) throw k.slice(4);
  if (k === "crash") throw new Error("crash on purpose");
  return [{ topic: undefined, key, value: key, headers: [] }];
}

export function init(config) {}
export function onMatch(key, a, b) { return answer(key); }
export function onExpire(key, event, side) { return answer(key); }
