-- drip's shared schedule in Redis: reserve departure slots on one GCRA per
-- limit (the arithmetic of src/shared/gcra.rs), or give unused ones back,
-- in one atomic step on the server's clock.
--
-- KEYS[1]  the state: a hash of limits, epoch, seq, tat1 .. tatN
-- ARGV[1]  "hello", "reserve" or "giveback"
-- ARGV[2]  "-1" for the server's TIME; otherwise a test clock in seconds,
-- ARGV[3]  and its nanoseconds
-- ARGV[4]  the limits' spec, which every participant must share
-- ARGV[5]  N, the number of limits; then each limit's interval and
--          tolerance in ns
-- then     reserve: want, horizon (ns); giveback: seq, first unused (ns)
--
-- Returns {1, seq, now, fresh, d1 - now, d2 - now, ...} (times in ns since
-- the epoch, whole seconds of the server's clock), {0, seq, now, 0} when a
-- giveback came too late, {-1, stored spec} when the limits differ.
local key = KEYS[1]
local op = ARGV[1]
local sec, nsec
if ARGV[2] == '-1' then
  local t = redis.call('TIME')
  sec = tonumber(t[1])
  nsec = tonumber(t[2]) * 1000
else
  sec = tonumber(ARGV[2])
  nsec = tonumber(ARGV[3])
end
local n = tonumber(ARGV[5])
local stored = redis.call('HMGET', key, 'limits', 'epoch', 'seq')
if stored[1] and stored[1] ~= ARGV[4] then
  return {-1, stored[1]}
end
local fresh = not stored[2]
local epoch = tonumber(stored[2]) or sec
local seq = tonumber(stored[3]) or 0
-- Rebase daily, so ns since the epoch stay exact in Lua's numbers.
local shift = 0
if sec - epoch > 86400 then
  shift = (sec - epoch) * 1e9
  epoch = sec
end
local now = (sec - epoch) * 1e9 + nsec
local interval, tolerance, tats = {}, {}, {}
for j = 1, n do
  interval[j] = tonumber(ARGV[4 + 2 * j])
  tolerance[j] = tonumber(ARGV[5 + 2 * j])
  local t = tonumber(redis.call('HGET', key, 'tat' .. j))
  if t then
    tats[j] = t - shift
  end
end
local extra = 6 + 2 * n
local out
if op == 'reserve' then
  local want = math.max(tonumber(ARGV[extra]), 1)
  local horizon = tonumber(ARGV[extra + 1])
  for j = 1, n do
    tats[j] = math.max(tats[j] or now, now)
  end
  seq = seq + 1
  out = {1, seq, now, fresh and 1 or 0}
  while #out - 4 < want do
    local due = now
    for j = 1, n do
      due = math.max(due, tats[j] - tolerance[j])
    end
    if #out > 4 and due > now + horizon then
      break
    end
    for j = 1, n do
      tats[j] = math.max(tats[j], due) + interval[j]
    end
    out[#out + 1] = due - now
  end
elseif op == 'giveback' then
  if fresh or tonumber(ARGV[extra]) ~= seq then
    return {0, seq, now, 0}
  end
  local first = tonumber(ARGV[extra + 1]) - shift
  for j = 1, n do
    if tats[j] then
      tats[j] = math.min(tats[j], first + tolerance[j])
    end
  end
  out = {1, seq, now, 0}
else
  out = {1, seq, now, fresh and 1 or 0}
end
local fields = {'limits', ARGV[4], 'epoch', epoch, 'seq', seq}
local last = now
for j = 1, n do
  if tats[j] then
    fields[#fields + 1] = 'tat' .. j
    fields[#fields + 1] = string.format('%d', tats[j])
    last = math.max(last, tats[j])
  end
end
redis.call('HSET', key, unpack(fields))
-- The state outlives its schedule by 10 s, then expires by itself.
redis.call('PEXPIRE', key, math.floor((last - now) / 1e6) + 10000)
return out
