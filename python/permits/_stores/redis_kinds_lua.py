"""Each rule kind's Lua functions, by kind, for the Redis steps (redis_scripts.py): a kind's state as its
operations read it. A script makes only its rule's kind's; the library makes them all."""

from __future__ import annotations

#: Each kind's functions, by kind (a script makes only its rule's kind's).
KINDS: dict[str, str] = {
    "token_bucket": r"""
-- token bucket: a = period index of the last change, b = tokens then.
-- Returns the period index now (never before a) and the tokens in it.
function tb_view()
  local sp = EXISTS and wstr(F[3]) or ZERO
  local tokens = EXISTS and tonumber(F[4]) or LIMIT
  local p = wmax(index_of(PERIOD), sp)
  if tokens < LIMIT and wcmp(p, sp) > 0 then
    local periods = wsub(p, sp)
    local to_full = iceil(LIMIT - tokens, AMOUNT)
    if wcmp(periods, wnum(to_full)) >= 0 then tokens = LIMIT else tokens = tokens + wval(periods) * AMOUNT end
  end
  return p, tokens
end
""",
    "fixed_window": r"""
-- fixed window: a = window index of the last change, b = permits counted in it.
-- Returns the window now (never before a), the permits used in it, and the window of the clock.
function fw_view()
  local sw = EXISTS and wstr(F[3]) or ZERO
  local count = EXISTS and tonumber(F[4]) or 0
  local idx = index_of(PERIOD)
  local w = wmax(idx, sw)
  return w, (wcmp(w, sw) == 0) and count or 0, idx
end
""",
    "sliding_window_counter": r"""
-- sliding window counter: a = window index, b = previous window's count, c = current's.
-- Returns the window now (never before a), its counts, the ns elapsed in it, and the clock's window.
function swc_view()
  local sw = EXISTS and wstr(F[3]) or ZERO
  local prev = EXISTS and tonumber(F[4]) or 0
  local cur = EXISTS and tonumber(F[5]) or 0
  local idx, rem = wdivmod(SINCE, PERIOD)
  local w = wmax(idx, sw)
  local c = wcmp(w, sw)
  if c > 0 then
    if wcmp(w, wadd(sw, 1)) == 0 then prev, cur = cur, 0 else prev, cur = 0, 0 end
  end
  -- a stored window ahead of the clock's: none of it has elapsed
  local elapsed = (wcmp(w, idx) == 0) and rem or ZERO
  return w, prev, cur, elapsed, idx
end
-- the counter's permits available: floor((limit*W - prev*(W - elapsed) - cur*W) / W), at least 0,
-- which is limit - cur - prev + floor(prev*elapsed / W) (the rest is a whole multiple of W)
function swc_available(prev, cur, elapsed)
  local left = LIMIT - cur - prev + wval(wdiv(wmul(wnum(prev), elapsed), PERIOD))
  return left > 0 and left or 0
end
""",
    "sliding_window": r"""
-- sliding window: a = head (the segment of the last grant), b = permits held in the list X,
-- whose items are "segment:count", oldest first, pruned to the head's window.
function sw_entry(item)
  local j, count = string.match(item, '^(%d+):(%d+)$')
  return wstr(j), tonumber(count)
end
-- The segment now (never before the head), and the permits held in its window (the list's total
-- less the items that left the window since the head's segment).
function sw_view()
  local head = EXISTS and wstr(F[3]) or ZERO
  local total = EXISTS and tonumber(F[4]) or 0
  local p = wmax(index_of(SEG), head)
  local used = total
  if wcmp(p, head) > 0 then
    local i = 0
    while true do
      local item = redis.call('LINDEX', X, i)
      if not item then break end
      local j, count = sw_entry(item)
      if wcmp(wadd(j, wnum(AMOUNT)), p) > 0 then break end -- still inside p's window
      used = used - count
      i = i + 1
    end
  end
  return p, used, head, total
end
""",
    "sliding_log": r"""
-- sliding log: a = head (the segment of the last grant), b = permits held in the list X, whose
-- items are "segment:count:stamp", oldest first (stamp: the time of the segment's latest grant);
-- an item's permits come back at its stamp + the window + 1 ns (the engine's sliding_log.hpp).
function sl_entry(item)
  local j, count, stamp = string.match(item, '^(%d+):(%d+):(%d+)$')
  return wstr(j), tonumber(count), wstr(stamp)
end
-- The segment now (never before the head), the permits held now, the head, the list's total, and
-- how many items at the list's front have come back.
function sl_view()
  local head = EXISTS and wstr(F[3]) or ZERO
  local total = EXISTS and tonumber(F[4]) or 0
  local p = wmax(index_of(SEG), head)
  local used, gone = total, 0
  while true do
    local item = redis.call('LINDEX', X, gone)
    if not item then break end
    local _, count, stamp = sl_entry(item)
    if wcmp(wadd(wadd(stamp, PERIOD), {1}), NOW) > 0 then break end
    used = used - count
    gone = gone + 1
  end
  return p, used, head, total, gone
end
""",
    "concurrency": r"""
-- concurrency: b = permits held; a field 'l<id>' = "count:expiry" per lease, and X scores each
-- lease id by its expiry (as a double: only to find the candidates, each checked exactly).
-- Returns `held` less the expired leases' permits; with `write`, those leases are removed.
function cc_drop_expired(held, write)
  local ids = redis.call('ZRANGEBYSCORE', X, '-inf', NOW_S)
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', H, 'l' .. id)
    if not v then
      if write then redis.call('ZREM', X, id) end
    else
      local count, expiry = string.match(v, '^(%d+):(%d+)$')
      if wcmp(wstr(expiry), NOW) <= 0 then
        held = held - tonumber(count)
        if write then redis.call('HDEL', H, 'l' .. id); redis.call('ZREM', X, id) end
      end
    end
  end
  return held
end
function cc_save(held)
  redis.call('HSET', H, 'sig', SIG, 'anchor', wfmt(ANCHOR), 'b', held)
  -- both keys outlive the latest lease: extended, never shortened (holders choose their ttl)
  for _, key in ipairs({H, X}) do
    if redis.call('PTTL', key) < TTL_MS then redis.call('PEXPIRE', key, TTL_MS) end
  end
end
""",
}
