-- drip's shared schedule in Redis: reserve departure slots on one GCRA per
-- limit (the arithmetic of src/shared/gcra.rs), or give unused ones back,
-- in one atomic step on the server's clock.
--
-- KEYS[1]  the state: a hash of limits, gen (how many times drip ctl
--          changed them), epoch, seq, tat1 .. tatN, and for settlements
--          charged (what the byte or cost limits were charged in this
--          life: every slot's size, every debit; charged2 .. chargedK the
--          same of a slot's other weights), last (the latest slot granted)
--          and life (the time, in us, the state started afresh; one more
--          at each relimit)
-- ARGV[1]  "hello", "reserve", "take", "giveback", "relimit" or "settle"
-- ARGV[2]  "-1" for the server's TIME; otherwise a test clock in seconds,
-- ARGV[3]  and its nanoseconds
-- ARGV[4]  the limits' spec, which every participant must share
-- ARGV[5]  N, the number of limits; then five values for each: "r",
--          interval, tolerance (ns), 0, 0 for a record limit; "b", count,
--          period (ns), burst (bytes), and which weight of a slot it spends
--          (1 .. K) for a byte (or cost) limit; then K, how many weights a
--          slot carries (one for each set of costs the cost limits spend,
--          src/shared/gcra.rs's Weight: 1 but for named costs of different
--          weights)
-- then     reserve: want, horizon (ns), within (ns: no slot unless the
--          first is due that soon; -1: within MOST_AHEAD, as any is at
--          most), then the K weights (bytes, or cost) of the record each
--          slot is for (1, 0, ... when not given); settle: the number of
--          settlements, then 4K + 1 values for each: the K units to give
--          back, the K to charge more, the K charged before the slot's
--          reservation, the K the slot was charged, and its life; take:
--          the K weights of the one slot, and how soon (ns) it must be
--          due; giveback: seq, first unused (ns), the K weights that slot
--          was reserved for
--
-- A slot of size s (on a limit, the weight that limit spends) costs a
-- record limit its interval, and may leave its
-- tolerance before TAT; it costs a byte limit ceil(s * period / count) ns,
-- and may leave floor((burst - min(s, burst)) * period / count) ns before
-- TAT (a record larger than the burst leaves once a full burst is saved,
-- and the schedule is in debt for the rest).
--
-- Returns {1, seq, now, fresh, charged, life, charged2, .., chargedK,
-- d1 - now, d2 - now, ...} for a reservation (charged and life as they
-- stood before it; {3, seq, now, fresh, charged, life, charged2, ..,
-- chargedK, due - now} when its first slot is not due
-- within the bound, nothing reserved), {1, seq, now, fresh} for the
-- others (times in ns since
-- the epoch, whole seconds of the server's clock), {0, seq, now, 0} when a
-- giveback came too late, {2, seq, now, fresh, due - now} when a take's slot
-- is not due in time (nothing written), {-1, stored spec, gen} when the
-- limits differ. "relimit" stores ARGV[4] and its limits whatever is
-- stored, one generation on: the new schedule starts after every slot
-- reserved (the latest TAT, or now), with no credit (each TAT a whole
-- tolerance past that), and seq moves on so no old slot goes back. When
-- the limits per key are shared too (a "key:" in the spec), it also
-- stores kgen (one on) and ks, kn (now, the server's clock): keys.lua
-- restarts each key's schedule so when it next touches the key.
-- "settle" charges each debit (TAT = max(TAT, now) + more; seq moves on,
-- so no giveback of a slot granted before it takes the debit back) and gives back
-- each overestimate of its life, never below its floor, max(now, last) +
-- (charged - before - slot) units, nor above the TAT (src/shared/gcra.rs,
-- Gcra::settle), each limit by the weight it spends.
local key = KEYS[1]
local n = tonumber(ARGV[5])
local nw = tonumber(ARGV[6 + 5 * n])
local stored = redis.call('HMGET', key, 'limits', 'epoch', 'seq', 'gen', 'charged', 'last', 'life')
local gen = number_of(stored[4]) or 0
if stored[1] and stored[1] ~= ARGV[4] and op ~= 'relimit' then
  return {-1, stored[1], gen}
end
-- Without a readable epoch the stored times mean nothing: a fresh state.
local epoch = number_of(stored[2])
local fresh = not epoch
epoch = epoch or sec
local seq = number_of(stored[3]) or 0
-- Rebase daily, so ns since the epoch stay exact in Lua's numbers.
local shift = 0
if sec - epoch > 86400 then
  shift = (sec - epoch) * 1e9
  epoch = sec
end
local now = (sec - epoch) * 1e9 + nsec
-- What each weight was charged (charged, charged2, ..).
local charged = {(not fresh and number_of(stored[5])) or 0}
for c = 2, nw do
  charged[c] = (not fresh and number_of(redis.call('HGET', key, 'charged' .. c))) or 0
end
local last = not fresh and number_of(stored[6])
if last then
  last = last - shift
end
local life = (not fresh and number_of(stored[7])) or (sec * 1e6 + math.floor(nsec / 1000))
local kind, a, b, c, w, tats = {}, {}, {}, {}, {}, {}
for j = 1, n do
  kind[j] = ARGV[1 + 5 * j]
  a[j] = tonumber(ARGV[2 + 5 * j])
  b[j] = tonumber(ARGV[3 + 5 * j])
  c[j] = tonumber(ARGV[4 + 5 * j])
  w[j] = tonumber(ARGV[5 + 5 * j])
  local t = number_of(redis.call('HGET', key, 'tat' .. j))
  if t and not fresh then
    tats[j] = t - shift
  end
end
-- The schedule (ns) a slot of s bytes takes on limit j.
local function cost(j, s)
  if kind[j] == 'b' then
    return math.ceil(s * b[j] / a[j])
  end
  return a[j]
end
-- How long (ns) before TAT a slot of s bytes may leave on limit j.
local function reach(j, s)
  if kind[j] == 'b' then
    return math.floor((c[j] - math.max(0, math.min(s, c[j]))) * b[j] / a[j])
  end
  return b[j]
end
-- The weight limit j spends of a slot weighing ws (a table of K).
local function on(j, ws)
  if kind[j] == 'b' then
    return ws[w[j]] or 0
  end
  return 1
end
local extra = 7 + 5 * n
-- The K weights from ARGV[at] on (1, 0, .. where absent).
local function weights(at)
  local ws = {}
  for k = 1, nw do
    ws[k] = tonumber(ARGV[at + k - 1]) or (k == 1 and 1 or 0)
  end
  return ws
end
-- The reply's head: code, seq, now, fresh, charged, life, charged2 ..
local function head(code)
  local h = {code, seq, now, fresh and 1 or 0, charged[1], life}
  for k = 2, nw do
    h[#h + 1] = charged[k]
  end
  return h
end
local out
-- The range every backend keeps (src/shared/gcra.rs, MOST_AHEAD and
-- MOST_DEBT): no slot granted more than 32 days ahead, no TAT stored more
-- than 96 days ahead, so every time stays under 2^53 ns.
local MOST_AHEAD = 32 * 86400 * 1e9
local MOST_DEBT = 3 * MOST_AHEAD
-- A relimit's fields for the keys' schedules (keys.lua).
local keyed = {}
-- A slot granted at due for size s: the TATs move on, it is charged.
local function grant(due, size)
  for j = 1, n do
    tats[j] = math.min(math.max(tats[j], due) + cost(j, on(j, size)), now + MOST_DEBT)
  end
  for k = 1, nw do
    charged[k] = charged[k] + size[k]
  end
  last = math.max(last or due, due)
end
-- When a slot for size s is due: the latest any limit lets it leave, now
-- at the earliest.
local function due_for(s)
  local due = now
  for j = 1, n do
    -- A slot weighing nothing on a weighed limit does not wait for it.
    if kind[j] ~= 'b' or on(j, s) > 0 then
      due = math.max(due, (tats[j] or now) - reach(j, on(j, s)))
    end
  end
  return due
end
-- Every TAT now at the least (a schedule that rested starts now).
local function from_now()
  for j = 1, n do
    tats[j] = math.max(tats[j] or now, now)
  end
end
if op == 'reserve' then
  local want = math.max(tonumber(ARGV[extra]), 1)
  local horizon = tonumber(ARGV[extra + 1])
  local within = tonumber(ARGV[extra + 2])
  if within < 0 or within > MOST_AHEAD then
    within = MOST_AHEAD
  end
  local due = due_for(weights(extra + 3))
  if due > now + within then
    out = head(3)
    out[#out + 1] = due - now
    return out
  end
  from_now()
  seq = seq + 1
  out = head(1)
  local at = #out
  while #out - at < want do
    local size = weights(extra + 3 + (#out - at) * nw)
    due = due_for(size)
    if #out > at and due > now + horizon then
      break
    end
    grant(due, size)
    out[#out + 1] = due - now
  end
elseif op == 'take' then
  local size = weights(extra)
  local within = math.min(tonumber(ARGV[extra + nw]), MOST_AHEAD)
  local due = due_for(size)
  if due > now + within then
    return {2, seq, now, fresh and 1 or 0, due - now}
  end
  from_now()
  grant(due, size)
  seq = seq + 1
  out = {1, seq, now, fresh and 1 or 0, due - now}
elseif op == 'giveback' then
  if fresh or tonumber(ARGV[extra]) ~= seq then
    return {0, seq, now, 0}
  end
  local first = tonumber(ARGV[extra + 1]) - shift
  local size = weights(extra + 2)
  for j = 1, n do
    -- A limit the slot did not wait for stays (Gcra::give_back_sized).
    if tats[j] and (kind[j] ~= 'b' or on(j, size) > 0) then
      tats[j] = math.min(tats[j], first + reach(j, on(j, size)))
    end
  end
  out = {1, seq, now, 0}
elseif op == 'relimit' then
  local start = now
  local j = 1
  while true do
    local t = redis.call('HGET', key, 'tat' .. j)
    if not t then
      break
    end
    if not fresh and number_of(t) then
      start = math.max(start, number_of(t) - shift)
    end
    if j > n then
      redis.call('HDEL', key, 'tat' .. j)
    end
    j = j + 1
  end
  for i = 1, n do
    tats[i] = math.min(start + reach(i, 0), now + MOST_DEBT)
  end
  seq = seq + 1
  gen = gen + 1
  life = life + 1
  out = {1, seq, now, fresh and 1 or 0}
  if string.find(ARGV[4], 'key:', 1, true) then
    local kgen = number_of(redis.call('HGET', key, 'kgen')) or 0
    keyed = {'kgen', kgen + 1, 'ks', sec, 'kn', nsec}
  end
elseif op == 'settle' then
  local m = tonumber(ARGV[extra])
  local stride = 4 * nw + 1
  for i = 0, m - 1 do
    local at = extra + 1 + stride * i
    local back = weights(at)
    local more = weights(at + nw)
    local before = weights(at + 2 * nw)
    local slot = weights(at + 3 * nw)
    local charges, gives = false, false
    for k = 1, nw do
      charges = charges or more[k] > 0
      gives = gives or back[k] > 0
    end
    if charges then
      for j = 1, n do
        if kind[j] == 'b' and on(j, more) > 0 then
          tats[j] = math.min(math.max(tats[j] or now, now) + cost(j, on(j, more)), now + MOST_DEBT)
        end
      end
      for k = 1, nw do
        charged[k] = charged[k] + more[k]
      end
      -- No slot granted before a debit goes back over it (Gcra::settle).
      seq = seq + 1
    end
    if gives and not fresh and tonumber(ARGV[at + 4 * nw]) == life then
      local base = math.max(now, last or now)
      for j = 1, n do
        if kind[j] == 'b' and tats[j] then
          local since = math.max(on(j, charged) - on(j, before) - on(j, slot), 0)
          local floor = base + cost(j, since)
          local given = tats[j] - math.floor(on(j, back) * b[j] / a[j])
          tats[j] = math.min(tats[j], math.max(given, floor))
        end
      end
    end
  end
  out = {1, seq, now, fresh and 1 or 0}
else
  out = {1, seq, now, fresh and 1 or 0}
end
local fields = {'limits', ARGV[4], 'gen', gen, 'epoch', epoch, 'seq', seq,
  'charged', string.format('%d', charged[1]), 'life', string.format('%d', life)}
for k = 2, nw do
  fields[#fields + 1] = 'charged' .. k
  fields[#fields + 1] = string.format('%d', charged[k])
end
if last then
  fields[#fields + 1] = 'last'
  fields[#fields + 1] = string.format('%d', last)
end
for _, f in ipairs(keyed) do
  fields[#fields + 1] = f
end
local last = now
for j = 1, n do
  if tats[j] then
    fields[#fields + 1] = 'tat' .. j
    fields[#fields + 1] = string.format('%d', tats[j])
    last = math.max(last, tats[j])
  end
end
if fresh then
  -- Times stored against an epoch no longer readable go with it.
  redis.call('DEL', key)
end
redis.call('HSET', key, unpack(fields))
-- The state outlives its schedule by 10 s, then expires by itself (and
-- after a relimit no sooner than it would have: the keys' schedules
-- outlive it otherwise, and their change with it).
local ttl = math.floor((last - now) / 1e6) + 10000
if op == 'relimit' then
  ttl = math.max(ttl, redis.call('PTTL', key))
end
redis.call('PEXPIRE', key, ttl)
return out
