"""The Lua of the Redis fixed window's own take (redis_scripts.py puts it in the library)."""

from __future__ import annotations

# The fixed window's take on its own (the hot path of the most used kind): FCALL of the library's
# fw_take (redis_scripts.FW_TAKE is its script form, TAKE itself). KEYS[1] = the state's hash; ARGV[1] =
# "<signature> <key ttl in ms>[ <limit>]" (the limit when it was changed: reconfigure; one argument:
# each costs the client and the server), ARGV[2] = n,
# ARGV[3] = now_ns (none: the server's TIME). Answers as TAKE. Where TAKE reads five fields, writes
# four with HSET and sets the expiry at every step, this one reads four, and a grant in the window
# already recorded adds n to the count (HINCRBY): the expiry is set when the window changes, to the
# key ttl, which for this kind is one window longer than the rule's lifetime
# (RedisBackend._rule_made): a key lives at least a lifetime past its last change, as with TAKE.
# Times are plain numbers while the state is younger than ~104 days (2**53 ns) and the window
# shorter; past that (or with the clock before the anchor by as much) the step is TAKE's own, from
# the same arguments.
FW_TAKE_LUA = r"""
-- a decimal ns time as whole seconds and nanoseconds (both plain)
-- (nil past 10**24 ns: the seconds would not be exact)
local function secs(s)
  local k = #s
  if k <= 9 then return 0, tonumber(s) end
  if k > 24 then return nil, nil end
  return tonumber(string.sub(s, 1, k - 9)), tonumber(string.sub(s, k - 8))
end
-- ARGV[1] read once per rule: its signature, limit, period and the key ttl (a cache of the library,
-- emptied past 1000 rules)
local RULES, RULES_N = {}, 0
local function fw_take(keys, args)
  local h = keys[1]
  local r = RULES[args[1]]
  if not r then
    r = {string.match(args[1], '^(fixed_window:(%d+):(%d+):%d+) (%d+) ?(%d*)$')}
    if r[5] and r[5] ~= '' then r[2] = r[5] end -- a changed limit: the states keep their signature
    if RULES_N >= 1000 then RULES, RULES_N = {}, 0 end
    RULES[args[1]], RULES_N = r, RULES_N + 1
  end
  local sig, limit_s, period_s, ttl = r[1], r[2], r[3], r[4]
  local f = redis.call('HMGET', h, 'sig', 'anchor', 'a', 'b')
  if f[1] and f[1] ~= sig then return {0, f[1]} end
  local limit, period, n = tonumber(limit_s), tonumber(period_s), tonumber(args[2])
  local now_s, nh, nl = args[3] or '', nil, nil
  if now_s == '' then
    local t = redis.call('TIME')
    nh, nl = tonumber(t[1]), tonumber(t[2]) * 1000
  else
    nh, nl = secs(now_s)
  end
  local exists = f[1] ~= false
  local ah, al = nh, nl
  if exists then ah, al = secs(f[2]) end
  local sw = exists and tonumber(f[3]) or 0
  local dh = nh and ah and nh - ah
  if not dh or dh >= 9000000 or dh <= -9000000 or period >= 9000000000000000 or sw >= 9000000000000000 then
    -- wide: TAKE's step, with its arguments (the second key is never read for this kind)
    KEYS, ARGV = {h, h}, {sig, 'fixed_window', limit_s, period_s, '0', ttl, now_s, '0', args[2]}
    if now_s == '' then ARGV[7] = string.format('%d%09d', nh, nl) end
    local mismatch = begin()
    if mismatch then return mismatch end
    return op_take()
  end
  local d = dh * 1000000000 + (nl - al) -- ns from the anchor to now (negative: the clock stepped back)
  local idx = d > 0 and idiv(d, period) or 0
  local count = exists and tonumber(f[4]) or 0
  local w, used = idx, 0
  if sw >= idx then w, used = sw, count end
  local free = limit - used
  if n == 0 and free > 0 or n > 0 and free >= n then
    if not exists then
      redis.call('HSET', h, 'sig', sig, 'anchor', string.format('%d%09d', nh, nl), 'a', w, 'b', n)
      redis.call('PEXPIRE', h, ttl)
    elseif n > 0 then
      if w == sw and w == idx then
        redis.call('HINCRBY', h, 'b', n)
      else -- a new window, or one ahead of the clock (its writes span more than a window)
        redis.call('HSET', h, 'a', string.format('%d', w), 'b', used + n)
        redis.call('PEXPIRE', h, ttl)
      end
    end
    -- the stamp: the window's start, anchor + w * period (in doubles while w * period is below P)
    local span, stamp = w * period, nil
    if span < 9000000000000000 then
      local lo = al + span
      local carry = idiv(lo, 1000000000)
      stamp = string.format('%d%09d', ah + carry, lo - carry * 1000000000)
    else
      stamp = wfmt(wadd(pair(ah, al), wmul(wnum(w), period)))
    end
    return '1 1 ' .. (free - n) .. ' -1 ' .. stamp
  end
  -- refused: the window in which `needed` fits starts at anchor + (w + k) * period
  local k = iceil(math.max(n, 1) - free, limit)
  local span, wait = (w + k) * period, nil
  if span >= 9000000000000000 then
    local at, now = wadd(wmul(wnum(w + k), period), pair(ah, al)), pair(nh, nl)
    wait = wfmt(wcmp(at, now) > 0 and wsub(at, now) or ZERO)
  else
    wait = string.format('%d', span > d and span - d or 0)
  end
  return '1 0 ' .. free .. ' ' .. wait .. ' 0'
end
"""
