"""The Lua code of the Redis backend: one step per operation (take, take_batch, refund, renew,
available), each run atomically by the server, in two forms made from the same pieces:

* ``LIBRARY``: a Redis Functions library (Redis >= 7: FUNCTION LOAD once, then FCALL ``FUNCTIONS[op]``).
  Its helpers are made once, when the server loads it; a step only runs its own code. Its name and
  its functions' names end in a hash of its code: versions sharing a server never clash.
* ``TAKE``, ``TAKE_BATCH``, ``REFUND``, ``RENEW``, ``AVAILABLE``: one script each (EVALSHA), for
  servers without FUNCTION and for Cluster clients. A script makes its helpers anew on every call, so
  it makes only those of the rule's kind and its operation.

Each kind's functions are in redis_kinds_lua.py, the fixed window's own take (``fw_take``, the
hot path of the most used kind) in redis_fw_lua.py.

Both run ``begin()`` first (the arguments, the time, the state's header: ``{0, stored signature}``
on a mismatch), then the operation's body, which reads the step as upvalues (a library's are set
by each call: a step runs alone on the server, and sets every one of them before use).

Why exact integers by hand: Redis runs Lua 5.1, whose numbers are doubles, exact only below 2**53.
Times in nanoseconds since the epoch are ~1.8e18, and the sliding window counter compares
``count * window`` products up to ~2**93, so every time, index and product is a "wide" integer
(redis_wide.py: a plain number while it is small, exact forms beyond) and only counts (< 2**31)
are always plain. Wide values are stored and passed as decimal strings, never as doubles.

Calling convention (KEYS and ARGV only: names and lease ids never become Lua source):

* KEYS[1]: the state's hash: ``sig`` (the rule's signature), ``anchor`` (ns), ``a``, ``b``, ``c``
  (the state, as each kind defines it), and for concurrency one field ``l<lease id>`` per lease;
  KEYS[2]: the sliding window's list of segment counts, or the concurrency leases by expiry (zset).
* ARGV[1..8]: signature, kind, limit, period_ns, amount, key ttl (ms), now_ns ("" for the
  server's TIME), lease_ttl_ns; then the operation's own arguments.
* Answer: ``{0, stored signature}`` when the state belongs to another rule, else ``{1, ...}``.
"""

from __future__ import annotations

import hashlib

from .redis_fw_lua import FW_TAKE_LUA as _FW_TAKE
from .redis_kinds_lua import KINDS as _KINDS
from .redis_wide import WIDE as _WIDE

# The step's arguments and state, as upvalues of every helper (begin() sets them).
_STATE = r"""
local H, X, SIG, KIND, LIMIT, AMOUNT, PERIOD, TTL_MS, NOW_S, NOW, LEASE_TTL
local F, EXISTS, ANCHOR, SINCE, SEG
local ZERO = 0
"""

# The arguments, the time of the step and the state's header; answers {0, sig} on a mismatch.
_BEGIN = r"""
local function begin()
  H, X = KEYS[1], KEYS[2]
  SIG, KIND = ARGV[1], ARGV[2]
  LIMIT, AMOUNT = tonumber(ARGV[3]), tonumber(ARGV[5])
  PERIOD = wstr(ARGV[4])
  TTL_MS = tonumber(ARGV[6])
  NOW_S, NOW = ARGV[7], nil
  if NOW_S == '' then
    -- the server's clock: seconds and microseconds, both exact as doubles (no decimal to parse)
    local t = redis.call('TIME')
    NOW = pair(tonumber(t[1]), tonumber(t[2]) * 1000)
    NOW_S = wfmt(NOW)
  else
    NOW = wstr(NOW_S)
  end
  LEASE_TTL = wstr(ARGV[8])

  F = redis.call('HMGET', H, 'sig', 'anchor', 'a', 'b', 'c')
  if F[1] and F[1] ~= SIG then return {0, F[1]} end
  EXISTS = F[1] ~= false
  ANCHOR = EXISTS and wstr(F[2]) or NOW
  -- time since the anchor; a clock read before the anchor (a server's clock stepped back) counts as it
  SINCE = wcmp(NOW, ANCHOR) > 0 and wsub(NOW, ANCHOR) or ZERO
  SEG = ZERO
  if KIND == 'sliding_window' then
    SEG = wdiv(PERIOD, wnum(AMOUNT))
  elseif KIND == 'sliding_log' then
    SEG = wdiv(wadd(PERIOD, wnum(AMOUNT - 1)), wnum(AMOUNT)) -- a segment: window / k, rounded up
  end
end
"""

_COMMON = r"""
local function index_of(length) return wdiv(SINCE, length) end
local function start_of(index, length) return wadd(ANCHOR, wmul(index, length)) end
-- A grant's stamp is the start of its period (of `length`) in clock time, not its index from the
-- anchor: a state made again (its keys expired, were evicted or flushed) is anchored later, and a
-- stamp of its predecessor's is before its anchor, so a late refund never goes into it.
local function stamp_of(index, length) return wfmt(start_of(index, length)) end
-- the index of the period a stamp starts in this state's timeline; nil when this state made no such stamp
local function index_of_stamp(stamp, length)
  if wcmp(stamp, ANCHOR) < 0 then return nil end
  local i = wdiv(wsub(stamp, ANCHOR), length)
  if wcmp(start_of(i, length), stamp) ~= 0 then return nil end
  return i
end
-- nanoseconds from now until `at` (0 if past), as a decimal string
local function wait_until(at)
  if wcmp(at, NOW) > 0 then return wfmt(wsub(at, NOW)) end
  return '0'
end
-- the state's fields a, b and (the counter's) c; the keys live TTL_MS past the change
local function save(a, b, c)
  if c == nil then
    redis.call('HSET', H, 'sig', SIG, 'anchor', wfmt(ANCHOR), 'a', a, 'b', b)
  else
    redis.call('HSET', H, 'sig', SIG, 'anchor', wfmt(ANCHOR), 'a', a, 'b', b, 'c', c)
  end
  redis.call('PEXPIRE', H, TTL_MS)
  -- the sliding window's (and log's) list lives as long as its header (the other kinds that save have none)
  if KIND == 'sliding_window' or KIND == 'sliding_log' then redis.call('PEXPIRE', X, TTL_MS) end
end

-- each kind's functions (_KINDS)
local tb_view, fw_view, swc_view, swc_available, sw_entry, sw_view, sl_entry, sl_view, cc_drop_expired, cc_save
"""


# The body of a take of `n` (TAKE itself, and TAKE_BATCH's take of its batch as a function of n).
_TAKE_BODY = r"""
local needed = math.max(n, 1)
-- a new state must not find an aux key left by an older one
if not EXISTS then redis.call('DEL', X) end

if KIND == 'token_bucket' then
  local p, tokens = tb_view()
  if n == 0 and tokens > 0 or n > 0 and tokens >= n then
    if n > 0 or not EXISTS then save(wfmt(p), tokens - n) end
    return {1, 1, tokens - n, '-1', stamp_of(p, PERIOD)}
  end
  -- tokens arrive `amount` at a time, at each period's start
  local at = start_of(wadd(p, wnum(iceil(needed - tokens, AMOUNT))), PERIOD)
  return {1, 0, tokens, wait_until(at), '0'}

elseif KIND == 'fixed_window' then
  local w, used = fw_view()
  local free = LIMIT - used
  if n == 0 and free > 0 or n > 0 and free >= n then
    if n > 0 or not EXISTS then save(wfmt(w), used + n) end
    return {1, 1, free - n, '-1', stamp_of(w, PERIOD)}
  end
  local at = start_of(wadd(w, wnum(iceil(needed - free, LIMIT))), PERIOD)
  return {1, 0, free, wait_until(at), '0'}

elseif KIND == 'sliding_window_counter' then
  local w, prev, cur, elapsed = swc_view()
  local ok
  if n == 0 then
    ok = swc_available(prev, cur, elapsed) > 0
  else
    -- prev * (W - elapsed) + (cur + n) * W <= limit * W
    ok = LIMIT - cur - n >= 0
      and wcmp(wmul(wnum(prev), wsub(PERIOD, elapsed)), wmul(wnum(LIMIT - cur - n), PERIOD)) <= 0
  end
  if ok then
    if n > 0 or not EXISTS then save(wfmt(w), prev, cur + n) end
    return {1, 1, swc_available(prev, cur + n, elapsed), '-1', stamp_of(w, PERIOD)}
  end
  -- The earliest time the estimate admits `needed`: in this window, else in the next one (where
  -- this window's count is the previous one). Elapsed e with prev*(W - e) <= spare*W, rounded up.
  local function earliest(win, p, c)
    local spare = LIMIT - c - needed
    if spare < 0 then return nil end
    local start = start_of(win, PERIOD)
    if p == 0 then return start end
    local slack = wdiv(wmul(wnum(spare), PERIOD), wnum(p))
    if wcmp(slack, PERIOD) >= 0 then return start end
    return wadd(start, wsub(PERIOD, slack))
  end
  local at = earliest(w, prev, cur) or earliest(wadd(w, {1}), cur, 0)
  return {1, 0, swc_available(prev, cur, elapsed), wait_until(at), '0'}

elseif KIND == 'sliding_window' then
  local p, used, head, total = sw_view()
  local free = LIMIT - used
  if n == 0 and free > 0 or n > 0 and free >= n then
    if n > 0 then
      if wcmp(p, head) > 0 then
        -- the head moves on: the items that left its window go
        while true do
          local item = redis.call('LINDEX', X, 0)
          if not item then break end
          local j = sw_entry(item)
          if wcmp(wadd(j, wnum(AMOUNT)), p) > 0 then break end
          redis.call('LPOP', X)
        end
        redis.call('RPUSH', X, wfmt(p) .. ':' .. n)
      else
        local last = redis.call('LINDEX', X, -1)
        local j, count
        if last then j, count = sw_entry(last) end
        if last and wcmp(j, p) == 0 then
          redis.call('LSET', X, -1, wfmt(p) .. ':' .. (count + n))
        else
          redis.call('RPUSH', X, wfmt(p) .. ':' .. n)
        end
      end
      redis.call('PEXPIRE', X, TTL_MS)
      save(wfmt(p), used + n)
    elseif not EXISTS then
      save('0', 0)
    end
    return {1, 1, free - n, '-1', stamp_of(p, SEG)}
  end
  -- Walk the window's segments oldest first: when segment j leaves (at the start of j + amount)
  -- its permits come back.
  local items = redis.call('LRANGE', X, 0, -1)
  local at = nil
  for _, item in ipairs(items) do
    local j, count = sw_entry(item)
    local leaves = wadd(j, wnum(AMOUNT))
    if wcmp(leaves, p) > 0 then
      free = free + count
      if free >= needed then at = start_of(leaves, SEG); break end
    end
  end
  if at == nil then at = start_of(wadd(p, wnum(AMOUNT)), SEG) end -- unreachable: needed <= limit
  return {1, 0, LIMIT - used, wait_until(at), '0'}

elseif KIND == 'sliding_log' then
  local p, used, _, _, gone = sl_view()
  local free = LIMIT - used
  if n == 0 and free > 0 or n > 0 and free >= n then
    if n > 0 then
      for _ = 1, gone do redis.call('LPOP', X) end -- the items that came back go
      local last = redis.call('LINDEX', X, -1)
      local j, count, stamp
      if last then j, count, stamp = sl_entry(last) end
      if last and wcmp(j, p) == 0 then
        redis.call('LSET', X, -1, wfmt(p) .. ':' .. (count + n) .. ':' .. wfmt(wmax(stamp, NOW)))
      else
        redis.call('RPUSH', X, wfmt(p) .. ':' .. n .. ':' .. wfmt(NOW))
      end
      redis.call('PEXPIRE', X, TTL_MS)
      save(wfmt(p), used + n)
    elseif not EXISTS then
      save('0', 0)
    end
    return {1, 1, free - n, '-1', stamp_of(p, SEG)}
  end
  -- Walk the items still held, oldest first: each one's permits come back at its stamp + window + 1.
  local items = redis.call('LRANGE', X, gone, -1)
  local at = NOW -- (unreachable: needed <= limit)
  for _, item in ipairs(items) do
    local _, count, stamp = sl_entry(item)
    free = free + count
    if free >= needed then at = wadd(wadd(stamp, PERIOD), {1}); break end
  end
  return {1, 0, LIMIT - used, wait_until(at), '0'}

else -- concurrency
  local id = ARGV[10]
  local held = EXISTS and tonumber(F[4]) or 0
  held = cc_drop_expired(held, true)
  local expiry = wfmt(wadd(NOW, LEASE_TTL))
  local granted = true
  local known = id and redis.call('HGET', H, 'l' .. id)
  if known then
    -- a retried take: granted again, counted once, its expiry as the retry sets it
    local count = string.match(known, '^(%d+):')
    redis.call('HSET', H, 'l' .. id, count .. ':' .. expiry)
    redis.call('ZADD', X, expiry, id)
  elseif n == 0 then
    granted = held < LIMIT
  elseif held + n <= LIMIT then
    held = held + n
    redis.call('HSET', H, 'l' .. id, n .. ':' .. expiry)
    redis.call('ZADD', X, expiry, id)
  else
    granted = false
  end
  cc_save(held)
  return {1, granted and 1 or 0, LIMIT - held, '-1', '0'}
end
"""

_TAKE = "local function take(n)" + _TAKE_BODY + "end\n"

#: Each operation's body, run after begin(), with whether it takes (needs take()) and its
#: function's flags (available writes nothing: a replica may answer it).
#:
#: take: ARGV[9] = n, ARGV[10] = the lease id (concurrency). Answers "1 granted(0/1) available
#: retry_after-ns("-1": none) stamp" as one string (a client parses one bulk reply much faster than
#: an array of five), or begin()'s {0, recorded signature} on a mismatch.
#:
#: take_batch (time-based kinds): ARGV[9] = n, ARGV[10] = most (n <= most, 1 <= most). Granted iff a
#: take of n is; then it takes min(most, what fits now), at least n. Answers TAKE's five, then the
#: permits taken (0 when refused) and the ns until the batch stops being valid (its stamp's end:
#: the window's for the fixed window and the counter, the segment's for the sliding window, the
#: next refill's for the token bucket; "0" when refused).
#:
#: refund: undoes a grant: ARGV[9] = n, ARGV[10] = the grant's stamp, ARGV[11] = the lease id
#: (concurrency: n below the lease's count gives back that many, and the lease goes on). Answers {1}.
#:
#: renew (concurrency): ARGV[9..] = lease ids, whose expiry becomes now + lease_ttl (those still
#: recorded). Answers {1, the ids not recorded (forgotten: expired, flushed, lost with a restart)...}.
#:
#: unused (the counter and the sliding window and log): permits counted at stamp ARGV[10] and never
#: used (a reserving limiter's stock), ARGV[9] of them, leave the count wherever it still weighs: the
#: counter's current window, or the previous one once the stamp's window has passed; the sliding
#: window's segment while it is inside the window; the log's while its permits have not come back.
#: (The token bucket's and the fixed window's are refunds: past its window, a fixed window's count
#: weighs nothing.) Answers {1}.
#:
#: available: the permits a request would find now; writes nothing. Answers {1, available}.
_OPS: dict[str, tuple[str, bool, str]] = {
    "take": ("return table.concat(take(tonumber(ARGV[9])), ' ')\n", True, ""),
    "take_batch": (
        r"""
local n, most = tonumber(ARGV[9]), tonumber(ARGV[10])
-- what fits now (a take's grant decides on the same), the stamp's index and its length
local fits, index, length
if KIND == 'token_bucket' then
  local p, tokens = tb_view()
  fits, index, length = tokens, p, PERIOD
elseif KIND == 'fixed_window' then
  local w, used = fw_view()
  fits, index, length = LIMIT - used, w, PERIOD
elseif KIND == 'sliding_window_counter' then
  local w, prev, cur, elapsed = swc_view()
  fits, index, length = swc_available(prev, cur, elapsed), w, PERIOD
elseif KIND == 'sliding_window' then
  local p, used = sw_view()
  fits, index, length = LIMIT - used, p, SEG
elseif KIND == 'sliding_log' then
  local p, used = sl_view()
  fits, index, length = LIMIT - used, p, SEG
else
  return redis.error_reply('TAKE_BATCH: a time-based kind only, not ' .. KIND)
end
local k = n
if fits >= math.max(n, 1) then k = math.min(most, fits) end
local r = take(k) -- refused: TAKE's refusal of n, to the letter
local granted = r[2] == 1
r[6] = granted and k or 0
r[7] = granted and wait_until(start_of(wadd(index, {1}), length)) or '0'
return r
""",
        True,
        "",
    ),
    "refund": (
        r"""
if not EXISTS then return {1} end -- the state is gone: as good as new already
local n = tonumber(ARGV[9])
local tag
if KIND ~= 'concurrency' then
  tag = index_of_stamp(wstr(ARGV[10]), (KIND == 'sliding_window' or KIND == 'sliding_log') and SEG or PERIOD)
  if not tag then return {1} end -- granted by a state made before this one: nothing of it is here
end

if KIND == 'token_bucket' then
  local p, tokens = tb_view()
  -- only what the bucket could not have refilled since the grant's period comes back
  local periods = wcmp(p, tag) > 0 and wsub(p, tag) or ZERO
  if wcmp(periods, wnum(iceil(n, AMOUNT))) >= 0 then return {1} end
  save(wfmt(p), math.min(LIMIT, tokens + n - wval(periods) * AMOUNT))

elseif KIND == 'fixed_window' or KIND == 'sliding_window_counter' then
  -- only while the grant's window is the state's and the clock's
  if wcmp(wstr(F[3]), tag) == 0 and wcmp(index_of(PERIOD), tag) == 0 then
    if KIND == 'fixed_window' then
      save(F[3], math.max(0, tonumber(F[4]) - n))
    else
      save(F[3], F[4], math.max(0, tonumber(F[5]) - n))
    end
  end

elseif KIND == 'sliding_window' then
  -- only while the grant's segment is the head and the clock's segment
  if wcmp(wstr(F[3]), tag) == 0 and wcmp(index_of(SEG), tag) == 0 then
    local last = redis.call('LINDEX', X, -1)
    if last then
      local j, count = sw_entry(last)
      if wcmp(j, tag) == 0 then
        local left = math.max(0, count - n)
        redis.call('LSET', X, -1, F[3] .. ':' .. left)
        save(F[3], tonumber(F[4]) - (count - left))
      end
    end
  end

elseif KIND == 'sliding_log' then
  -- only while the grant's segment is the head and the clock's segment (its stamp stays)
  if wcmp(wstr(F[3]), tag) == 0 and wcmp(index_of(SEG), tag) == 0 then
    local last = redis.call('LINDEX', X, -1)
    if last then
      local j, count, stamp = sl_entry(last)
      if wcmp(j, tag) == 0 then
        local left = math.max(0, count - n)
        redis.call('LSET', X, -1, F[3] .. ':' .. left .. ':' .. wfmt(stamp))
        save(F[3], tonumber(F[4]) - (count - left))
      end
    end
  end

else -- concurrency: the lease's release, or n of its permits (a settle: the lease goes on)
  local held = cc_drop_expired(tonumber(F[4]), true)
  local id = ARGV[11]
  local v = id and redis.call('HGET', H, 'l' .. id)
  if v then
    local count, rest = string.match(v, '^(%d+)(:%d+)$')
    count = tonumber(count)
    local n = math.min(count, tonumber(ARGV[9]))
    held = held - n
    if n < count then
      redis.call('HSET', H, 'l' .. id, (count - n) .. rest)
    else
      redis.call('HDEL', H, 'l' .. id)
      redis.call('ZREM', X, id)
    end
  end
  cc_save(held)
end
return {1}
""",
        False,
        "",
    ),
    "renew": (
        r"""
local out = {1}
if KIND ~= 'concurrency' then return out end
if not EXISTS then
  for i = 9, #ARGV do out[#out + 1] = ARGV[i] end
  return out
end
local held = cc_drop_expired(tonumber(F[4]), true)
local expiry = wfmt(wadd(NOW, LEASE_TTL))
for i = 9, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', H, 'l' .. id)
  if v then
    redis.call('HSET', H, 'l' .. id, string.match(v, '^(%d+):') .. ':' .. expiry)
    redis.call('ZADD', X, expiry, id)
  else
    out[#out + 1] = id
  end
end
cc_save(held)
return out
""",
        False,
        "",
    ),
    "unused": (
        r"""
if not EXISTS then return {1} end -- the state is gone: as good as new already
local n = tonumber(ARGV[9])
local tag = index_of_stamp(wstr(ARGV[10]), KIND == 'sliding_window_counter' and PERIOD or SEG)
if not tag then return {1} end -- counted by a state made before this one: nothing of it is here
if KIND == 'sliding_window_counter' then
  local w, prev, cur = swc_view()
  if wcmp(w, tag) == 0 then cur = math.max(0, cur - n)
  elseif wcmp(w, wadd(tag, 1)) == 0 then prev = math.max(0, prev - n)
  else return {1} end
  save(wfmt(w), prev, cur)
elseif KIND == 'sliding_window' then
  local p = sw_view()
  if wcmp(wadd(tag, wnum(AMOUNT)), p) <= 0 then return {1} end -- the segment has left the window
  local items = redis.call('LRANGE', X, 0, -1)
  for i, item in ipairs(items) do
    local j, count = sw_entry(item)
    if wcmp(j, tag) == 0 then
      local left = math.max(0, count - n)
      redis.call('LSET', X, i - 1, wfmt(j) .. ':' .. left)
      save(F[3], tonumber(F[4]) - (count - left))
      break
    end
  end
elseif KIND == 'sliding_log' then
  -- while the segment's item is still held (its stamp stays)
  local _, _, _, _, gone = sl_view()
  local items = redis.call('LRANGE', X, gone, -1)
  for i, item in ipairs(items) do
    local j, count, stamp = sl_entry(item)
    if wcmp(j, tag) == 0 then
      local left = math.max(0, count - n)
      redis.call('LSET', X, gone + i - 1, wfmt(j) .. ':' .. left .. ':' .. wfmt(stamp))
      save(F[3], tonumber(F[4]) - (count - left))
      break
    end
  end
end -- (the token bucket's and the fixed window's are refunds: RedisBackend.give_back_unused)
return {1}
""",
        False,
        "",
    ),
    "available": (
        r"""
if not EXISTS then return {1, LIMIT} end
if KIND == 'token_bucket' then
  local _, tokens = tb_view()
  return {1, tokens}
elseif KIND == 'fixed_window' then
  local _, used = fw_view()
  return {1, LIMIT - used}
elseif KIND == 'sliding_window_counter' then
  local _, prev, cur, elapsed = swc_view()
  return {1, swc_available(prev, cur, elapsed)}
elseif KIND == 'sliding_window' or KIND == 'sliding_log' then
  local _, used = (KIND == 'sliding_window' and sw_view or sl_view)()
  return {1, LIMIT - used}
end
return {1, LIMIT - cc_drop_expired(tonumber(F[4]), false)}
""",
        False,
        "no-writes",
    ),
}


def _script(op: str) -> str:
    """The script of one operation: its helpers, then begin(), then its kind's functions, then its body."""
    body, takes, _ = _OPS[op]
    kinds = "".join(
        f"{'if' if i == 0 else 'elseif'} KIND == '{kind}' then\n{code}" for i, (kind, code) in enumerate(_KINDS.items())
    )
    return (
        _WIDE
        + _STATE
        + _COMMON
        + (_TAKE if takes else "")
        + _BEGIN
        + "local mismatch = begin()\nif mismatch then return mismatch end\n"
        + kinds
        + "end\n"
        + body
    )


TAKE = _script("take")
TAKE_BATCH = _script("take_batch")
REFUND = _script("refund")
RENEW = _script("renew")
AVAILABLE = _script("available")
UNUSED = _script("unused")


def _library() -> tuple[str, str, dict[str, str]]:
    """The library's code, its name and its functions' names (each ending in a hash of the code)."""
    ops = "".join(f"local function op_{op}()\n{body}end\n" for op, (body, _, _) in _OPS.items())
    code = (
        "local KEYS, ARGV -- each call's\n"
        + _WIDE
        + _STATE
        + _COMMON
        + "".join(_KINDS.values())
        + _TAKE
        + _BEGIN
        + ops
        + _FW_TAKE
        + r"""
local function step(op)
  return function(keys, args)
    KEYS, ARGV = keys, args
    local mismatch = begin()
    if mismatch then return mismatch end
    return op()
  end
end
"""
    )
    tag = hashlib.sha1(code.encode()).hexdigest()[:16]
    names = {op: f"permits_{op}_{tag}" for op in _OPS}
    registered = "".join(
        f"redis.register_function{{function_name = '{names[op]}', callback = step(op_{op})"
        + (f", flags = {{'{flags}'}}" if flags else "")
        + "}\n"
        for op, (_, _, flags) in _OPS.items()
    )
    names["fw_take"] = f"permits_fw_take_{tag}"
    registered += f"redis.register_function{{function_name = '{names['fw_take']}', callback = fw_take}}\n"
    name = f"permits_{tag}"
    return f"#!lua name={name}\n" + code + registered, name, names


#: The Redis Functions library, its name, and each operation's function.
LIBRARY, LIBRARY_NAME, FUNCTIONS = _library()

#: The fixed window's take as a script (servers without FUNCTION, Cluster clients): TAKE itself, its
#: arguments made from FCALL fw_take's.
FW_TAKE = (
    "local sig, limit, period, ttl, changed = string.match(ARGV[1], '^(fixed_window:(%d+):(%d+):%d+) (%d+) ?(%d*)$')\n"
    "if changed and changed ~= '' then limit = changed end\n"
    "local KEYS = {KEYS[1], KEYS[1]}\n"
    "local ARGV = {sig, 'fixed_window', limit, period, '0', ttl, ARGV[3] or '', '0', ARGV[2]}\n" + TAKE
)
