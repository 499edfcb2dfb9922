// Added by cojoin's build (world plugin-n): the host's batches of calls, each handed to onMatchN /
// onExpireN above, in order. A thrown string is that call's error; anything else thrown fails the
// whole batch, and the host then makes the calls one by one.
export function onBatchN(calls) {
  const results = new Array(calls.length);
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i];
    const args = call.val;
    try {
      results[i] = {
        tag: "ok",
        val: call.tag === "on-match-n" ? onMatchN(args.key, args.events) : onExpireN(args.key, args.event, args.partners),
      };
    } catch (e) {
      if (typeof e !== "string") throw e;
      results[i] = { tag: "err", val: e };
    }
  }
  return results;
}
