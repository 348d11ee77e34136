"""Exact non-negative integers for the Redis backend's Lua scripts (the start of their prelude).

Redis runs Lua 5.1, whose numbers are doubles, exact only below 2**53. Times in nanoseconds since
the epoch are ~1.8e18 and the sliding window counter compares ``count * window`` products up to
~2**93, so the scripts need exact integers beyond the doubles. Doing all of a step's arithmetic in
limbs cost most of the step, while nearly all its values are small: periods, indexes, the time
since the anchor. So a value takes the cheapest form that holds it exactly:

* a Lua number, for every value below ``P = 9 * 10**15`` (< 2**53: each such integer is a double,
  and a sum or product checked against ``P`` is exact or, rounded, still past it): the plain path;
* a pair ``{h = hi, l = lo}`` meaning ``hi * 10**9 + lo`` (``0 <= lo < 10**9``), for a value from
  ``P`` up to ``10**24`` (``hi < 10**15``): a ns time as seconds and nanoseconds. Comparing two
  times, subtracting one from another (the time since the anchor) or adding a plain number to one
  (a window's start) stays in doubles. One read from a string keeps it (``s``) for formatting;
* a table of base-10**7 limbs (little-endian, no leading zero limbs) for the rest, and for any
  operation the two paths above cannot take (a product or quotient of wide values): the general
  path, whose functions are made only by a step that needs them.

Every operation returns a number whenever its result is below ``P`` (so the forms are ordered:
a number is smaller than any pair or limbs). The w* functions take any form, small limb tables
too (``{1}``, ``{}``).
"""

from __future__ import annotations

WIDE = r"""
-- A script (not the library of functions) makes these functions anew at every step, and each
-- upvalue a function captures costs a walk of the open upvalues then: fast paths use literals
-- (P = 9000000000000000, G = 1000000000) and globals, and the general path is made only when a
-- step needs it.

-- floor(a / b) for plain non-negative integers a, b > 0 below 2**53: the double quotient is at
-- most one off, and each check's product is exact or, rounded, still on the right side of a
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function iceil(a, b) return idiv(a + b - 1, b) end
-- a limb table's value as a number when below P (at most 3 limbs, the top one < 90), else itself
local function canon(a)
  local k = #a
  if k > 3 or k == 3 and a[3] >= 90 then return a end
  local v = 0
  for i = k, 1, -1 do v = v * 10000000 + a[i] end
  return v
end

-- The general path: limbs, made by the first step that needs them (most never do).
local LIMBS
local function limbs()
  if LIMBS then return LIMBS end
  local B = 10000000 -- a limb product is < 10**14, sums of a few stay < 2**53
  local floor = math.floor
  local function norm(a)
    local i = #a
    while i > 0 and a[i] == 0 do a[i] = nil; i = i - 1 end
    return a
  end
  -- from a plain non-negative integer (< 2**53)
  local function num(x)
    local a = {}
    while x > 0 do local r = x % B; a[#a + 1] = r; x = (x - r) / B end
    return a
  end
  -- from a decimal string
  local function str(s)
    local a, i = {}, #s
    while i > 0 do
      local j = math.max(1, i - 6)
      a[#a + 1] = tonumber(string.sub(s, j, i))
      i = j - 1
    end
    return norm(a)
  end
  local function fmt(a)
    if #a == 0 then return '0' end
    local parts = {string.format('%d', a[#a])}
    for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
    return table.concat(parts)
  end
  local function cmp(a, b)
    if #a ~= #b then return #a < #b and -1 or 1 end
    for i = #a, 1, -1 do
      if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
    end
    return 0
  end
  local function add(a, b)
    local r, c = {}, 0
    for i = 1, math.max(#a, #b) do
      local s = (a[i] or 0) + (b[i] or 0) + c
      if s >= B then r[i] = s - B; c = 1 else r[i] = s; c = 0 end
    end
    if c > 0 then r[#r + 1] = c end
    return r
  end
  -- a - b, for a >= b
  local function sub(a, b)
    local r, c = {}, 0
    for i = 1, #a do
      local s = a[i] - (b[i] or 0) - c
      if s < 0 then r[i] = s + B; c = 1 else r[i] = s; c = 0 end
    end
    return norm(r)
  end
  -- a * d for a plain 0 <= d < B
  local function muls(a, d)
    local r, c = {}, 0
    for i = 1, #a do
      local t = a[i] * d + c
      c = floor(t / B)
      r[i] = t - c * B
    end
    if c > 0 then r[#r + 1] = c end
    return norm(r)
  end
  local function mul(a, b)
    if #a == 0 or #b == 0 then return {} end
    local r = {}
    for i = 1, #a + #b do r[i] = 0 end
    for i = 1, #a do
      local c = 0
      for j = 1, #b do
        local t = r[i + j - 1] + a[i] * b[j] + c
        c = floor(t / B)
        r[i + j - 1] = t - c * B
      end
      local k = i + #b
      while c > 0 do
        local t = r[k] + c
        c = floor(t / B)
        r[k] = t - c * B
        k = k + 1
      end
    end
    return norm(r)
  end
  -- a / B**k, approximately (its top limbs as a double): for estimating quotient limbs only
  local function approx(a, k)
    local v = 0
    for i = #a, math.max(1, #a - 3), -1 do v = v + a[i] * B ^ (i - 1 - k) end
    return v
  end
  -- floor(a / b) and a % b, for b > 0: long division, each quotient limb estimated with doubles
  -- and then corrected exactly (so the estimate's rounding never matters, only its speed)
  local function divmod(a, b)
    local q, r = {}, {}
    for i = #a, 1, -1 do
      table.insert(r, 1, a[i])
      norm(r)
      local d = 0
      if cmp(r, b) >= 0 then
        d = floor(approx(r, #b - 1) / approx(b, #b - 1))
        if d >= B then d = B - 1 end
        local t = muls(b, d)
        while cmp(t, r) > 0 do d = d - 1; t = sub(t, b) end
        r = sub(r, t)
        while cmp(r, b) >= 0 do d = d + 1; r = sub(r, b) end
      end
      q[i] = d
    end
    return norm(q), r
  end
  -- any form as limbs; a pair's hi * 10**9 + lo is hi1 * 10**14 + (hi0 * 100 + lo1) * B + lo0
  local function of(a)
    if type(a) == 'number' then return num(a) end
    if not a.h then return a end
    local hi0, lo0 = a.h % 100000, a.l % B
    local r = num((a.h - hi0) / 100000)
    table.insert(r, 1, hi0 * 100 + (a.l - lo0) / B)
    table.insert(r, 1, lo0)
    return norm(r)
  end
  LIMBS = {num = num, str = str, fmt = fmt, of = of, cmp = cmp, add = add, sub = sub, mul = mul, divmod = divmod}
  return LIMBS
end

-- hi * G + lo (0 <= lo < G, hi a plain number) in its form
local function pair(hi, lo)
  if hi < 9000000 then return hi * 1000000000 + lo end
  if hi < 1000000000000000 then return {h = hi, l = lo} end
  return limbs().str(string.format('%d%09d', hi, lo))
end
-- from a decimal string (what ARGV and the state hold)
local function wstr(s)
  local v = tonumber(s)
  if v and v < 9000000000000000 then return v end -- exact below P; at or past it, v >= P too
  local k = #s
  if not v or string.sub(s, 1, 1) == '0' then return canon(limbs().str(s)) end -- '' or leading zeros
  if k > 24 then return limbs().str(s) end
  return {h = tonumber(string.sub(s, 1, k - 9)), l = tonumber(string.sub(s, k - 8)), s = s}
end
-- from a plain non-negative integer (< 2**53)
local function wnum(x)
  if x < 9000000000000000 then return x end
  return limbs().num(x)
end
-- the decimal string
local function wfmt(a)
  if type(a) == 'number' then return string.format('%d', a) end
  if not a.h then return limbs().fmt(a) end
  if not a.s then a.s = string.format('%d%09d', a.h, a.l) end
  return a.s
end
-- a plain number again: only for values known to be small (< 2**53)
local function wval(a)
  if type(a) == 'number' then return a end
  if a.h then return a.h * 1000000000 + a.l end
  local v = 0
  for i = #a, 1, -1 do v = v * 10000000 + a[i] end
  return v
end
-- In each operation below, a small limb table is first made a number (canon): then a table
-- with h is a pair, one without is limbs, and both are >= P.
local function wcmp(a, b)
  local ta, tb = type(a), type(b)
  if ta == 'table' and not a.h then a = canon(a); ta = type(a) end
  if tb == 'table' and not b.h then b = canon(b); tb = type(b) end
  if ta == 'number' or tb == 'number' then
    if ta ~= tb then return ta == 'number' and -1 or 1 end -- the other one is >= P
    return a < b and -1 or a > b and 1 or 0
  end
  if a.h and b.h then
    if a.h ~= b.h then return a.h < b.h and -1 or 1 end
    return a.l < b.l and -1 or a.l > b.l and 1 or 0
  end
  local L = limbs()
  return L.cmp(L.of(a), L.of(b))
end
local function wmax(a, b) return wcmp(a, b) >= 0 and a or b end
local function wadd(a, b)
  local ta, tb = type(a), type(b)
  if ta == 'table' and not a.h then a = canon(a); ta = type(a) end
  if tb == 'table' and not b.h then b = canon(b); tb = type(b) end
  if ta == 'number' and tb == 'number' then
    local s = a + b
    if s < 9000000000000000 then return s end -- exact below P; a rounded sum past it, truly so
  elseif (ta == 'number' or a.h) and (tb == 'number' or b.h) then -- a pair and a number or pair
    if ta == 'number' then a, b, tb = b, a, ta end -- a is the pair
    local hi, lo = a.h, a.l
    if tb == 'number' then lo = lo + b else hi, lo = hi + b.h, lo + b.l end
    if lo >= 1000000000 then
      local c = idiv(lo, 1000000000)
      hi, lo = hi + c, lo - c * 1000000000
    end
    return pair(hi, lo)
  end
  local L = limbs()
  return L.add(L.of(a), L.of(b)) -- >= P
end
-- a - b, for a >= b
local function wsub(a, b)
  local ta, tb = type(a), type(b)
  if ta == 'table' and not a.h then a = canon(a); ta = type(a) end
  if tb == 'table' and not b.h then b = canon(b); tb = type(b) end
  if ta == 'number' and tb == 'number' then return a - b end
  if ta == 'table' and a.h and (tb == 'number' or b.h) then -- a pair less a number or a pair
    local hi, lo = a.h, a.l
    if tb == 'number' then lo = lo - b else hi, lo = hi - b.h, lo - b.l end
    if lo < 0 then
      local c = idiv(999999999 - lo, 1000000000) -- borrowed: lo + c * G lands in [0, G)
      hi, lo = hi - c, lo + c * 1000000000
    end
    return pair(hi, lo)
  end
  local L = limbs()
  return canon(L.sub(L.of(a), L.of(b)))
end
local function wmul(a, b)
  if type(a) == 'number' and type(b) == 'number' then
    local p = a * b
    if p < 9000000000000000 then return p end -- as for a sum
    -- past P, whole seconds (a multiple of G: most periods) times a number is a pair
    if b % 1000000000 == 0 then a, b = b, a end
    if a % 1000000000 == 0 then
      local hi = a / 1000000000 * b
      if hi < 1000000000000000 then return pair(hi, 0) end
    end
  end
  local L = limbs()
  return canon(L.mul(L.of(a), L.of(b)))
end
-- floor(a / b) and a % b, for b > 0
local function wdivmod(a, b)
  local ta, tb = type(a), type(b)
  if ta == 'number' and tb == 'number' then
    local q = idiv(a, b)
    return q, a - q * b
  end
  if ta == 'number' then -- b is a table
    if not b.h then b = canon(b) end
    if type(b) ~= 'number' then return 0, a end -- b >= P > a
    local q = idiv(a, b)
    return q, a - q * b
  end
  if tb == 'number' and a.h and b % 1000000000 == 0 then
    -- a pair (a state's age past P ns, ~104 days) by whole seconds: as lo < G,
    -- floor((hi * G + lo) / (s * G)) = floor(hi / s), and the rest stays below b
    local s = b / 1000000000
    local q = idiv(a.h, s)
    return q, (a.h - q * s) * 1000000000 + a.l
  end
  local L = limbs()
  local q, r = L.divmod(L.of(a), L.of(b))
  return canon(q), canon(r)
end
local function wdiv(a, b)
  if type(a) == 'number' and type(b) == 'number' then return idiv(a, b) end
  local q = wdivmod(a, b)
  return q
end
"""
