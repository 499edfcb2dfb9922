// Does nothing and returns nothing: the floor of a JavaScript plugin's per-call cost.
export function init(config) {}
export function onMatch(key, a, b) { return []; }
export function onExpire(key, event, side) { return []; }
