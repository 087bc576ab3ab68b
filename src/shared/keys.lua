-- drip's shared limits per key in Redis: reserve departure slots on one
-- GCRA per key (the arithmetic of src/shared/gcra.rs with one limit, as
-- KeyBook in src/shared/keys.rs does for the state file), or give unused
-- ones back, for many keys in one atomic step on the server's clock.
--
-- KEYS[1]  the state of the NAME (its hash holds the limits' spec, gen,
--          and, once drip ctl changed them, kgen and ks, kn: how many
--          times and when, on the server's clock)
-- KEYS[2..] one hash per key: s, n (its TAT: seconds and ns of the
--          server's clock), seq, g (the kgen it follows)
-- ARGV[1]  "hello", "reserve" or "giveback"
-- ARGV[2]  "-1" for the server's TIME; otherwise a test clock in seconds,
-- ARGV[3]  and its nanoseconds
-- ARGV[4]  the limits' spec, which every participant must share
-- ARGV[5]  the horizon (ns)
-- then     five for each key: reserve: want, after and every (up to want
--          slots, slot j no earlier than after + j * every ns from now,
--          all due within the horizon of the first's earliest time, at
--          least one); giveback: seq, and the first unused slot's seconds
--          and ns; then its own limit's interval and tolerance (ns: each
--          key's row of the rate table, else the key rate)
--
-- Returns {1, fresh, sec, nsec, then for each key: seq, count, d1, d2, ...}
-- (reserve: departure times in ns after sec.nsec; giveback: count 1 when
-- given back, 0 when someone reserved since), {-1, stored spec, gen} when
-- the limits differ. Times are kept relative to now, so Lua's numbers
-- stay exact. A key whose g is behind kgen, busy when the limits changed,
-- first restarts its schedule as script.lua's relimit does: after its
-- slots reserved, with no credit (its TAT a whole tolerance later), its
-- seq moved on so no old slot goes back.
local meta = KEYS[1]
local spec = ARGV[4]
local m = redis.call('HMGET', meta, 'limits', 'gen', 'kgen', 'ks', 'kn')
local stored = m[1]
if stored and stored ~= spec then
  return {-1, stored, number_of(m[2]) or 0}
end
local kgen = number_of(m[3]) or 0
local changed_at = -2^52
if number_of(m[4]) and number_of(m[5]) then
  changed_at = (number_of(m[4]) - sec) * 1e9 + (number_of(m[5]) - nsec)
end
local fresh = 0
if not stored then
  fresh = 1
  redis.call('HSET', meta, 'limits', spec, 'epoch', sec, 'seq', 0)
end
local horizon = tonumber(ARGV[5])
local out = {1, fresh, sec, nsec}
local longest = 0
for i = 2, #KEYS do
  local k = KEYS[i]
  local base = 6 + 5 * (i - 2)
  local interval = tonumber(ARGV[base + 3])
  local tolerance = tonumber(ARGV[base + 4])
  local st = redis.call('HMGET', k, 's', 'n', 'seq', 'g')
  local tat
  local ts, tn = number_of(st[1]), number_of(st[2])
  if ts and tn then
    tat = (ts - sec) * 1e9 + (tn - nsec)
  end
  local seq = number_of(st[3]) or 0
  local changed = false
  if tat and (number_of(st[4]) or 0) < kgen then
    if tat > changed_at then
      tat = tat + tolerance
    end
    seq = seq + 1
    changed = true
  end
  if op == 'reserve' then
    local want = math.max(tonumber(ARGV[base]), 1)
    local after = math.max(tonumber(ARGV[base + 1]), 0)
    local every = math.max(tonumber(ARGV[base + 2]), 0)
    local t = math.max(tat or 0, 0)
    seq = seq + 1
    local slots = {}
    while #slots < want do
      local due = math.max(after + #slots * every, t - tolerance)
      if #slots > 0 and due > after + horizon then
        break
      end
      t = math.max(t, due) + interval
      slots[#slots + 1] = due
    end
    out[#out + 1] = seq
    out[#out + 1] = #slots
    for _, d in ipairs(slots) do
      out[#out + 1] = d
    end
    tat = t
    changed = true
  elseif op == 'giveback' then
    local back = 0
    if tat and tonumber(ARGV[base]) == seq then
      local first = (tonumber(ARGV[base + 1]) - sec) * 1e9 + (tonumber(ARGV[base + 2]) - nsec)
      tat = math.min(tat, first + tolerance)
      back = 1
      changed = true
    end
    out[#out + 1] = seq
    out[#out + 1] = back
  end
  if changed then
    local at = nsec + tat
    local s = sec + math.floor(at / 1e9)
    local n = at - (s - sec) * 1e9
    redis.call('HSET', k, 's', string.format('%d', s), 'n', string.format('%d', n), 'seq', seq, 'g', kgen)
    -- Each key's state outlives its schedule by 10 s, then expires.
    local ttl = math.floor(math.max(tat, 0) / 1e6) + 10000
    redis.call('PEXPIRE', k, ttl)
    longest = math.max(longest, ttl)
  end
end
-- The NAME's state (the limits) lives at least as long as its keys'.
longest = math.max(longest, 10000)
if redis.call('PTTL', meta) < longest then
  redis.call('PEXPIRE', meta, longest)
end
return out
