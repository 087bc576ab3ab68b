-- drip's shared job limits in Redis (--share-jobs, and each key's
-- --key-jobs under --share): a lease per running job of a pool, in one
-- sorted set scored by each lease's expiry (ms of the server's clock),
-- and the jobs waiting for one, first come first served, changed in one
-- atomic step. A pool is its three keys: the fleet's, or a key's.
--
-- KEYS[1]  the leases: drip:{NAME}:jobs (the fleet's), or
--          drip:{NAME}:jobs:key:HEX (a key's, HEX its bytes in hex)
-- KEYS[2]  the waiting jobs, scored by arrival (us): KEYS[1]:waiting
-- KEYS[3]  the waiting jobs, scored by when they stop counting unless
--          they ask again (ms): KEYS[1]:asking
-- ARGV[1]  "acquire", "renew" or "release"
-- ARGV[2]  the pool's limit, the caller's (N of --share-jobs, a key's)
-- ARGV[3]  a lease's time to live, ms
-- KEYS[4]  the leases' epoch, one for every pool (drip:{NAME}:jobs:epoch),
--          and, after a loss, when leases may be taken again (ms):
--          "EPOCH QUIET_UNTIL", kept a day past the last call
-- ARGV[4]  how long a waiting job keeps its place without asking again, ms
-- ARGV[5]  the epoch the caller knows ("": none yet)
-- ARGV[6..] the members: acquire one, renew or release any number
--
-- An acquire takes a lease only while fewer than N are held and fewer
-- jobs wait ahead of it than there are leases free; otherwise its member
-- waits in line (at the back when new) and {0, leases held, epoch, lost}
-- is returned. Returns {1, leases held after, epoch, lost} when done.
-- Leases past their expiry, and waiting jobs that stopped asking, are
-- dropped first. A caller that knew an epoch that is gone (FLUSHALL, a
-- restart without persistence) finds the state lost (lost = 1): no lease
-- is taken for a lease's time to live, while the drips running jobs
-- renew theirs.
local key = KEYS[1]
local waiting = KEYS[2]
local asking = KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[3])
local wait_ttl = tonumber(ARGV[4])
local known = ARGV[5]
local stored = redis.call('GET', KEYS[4])
local epoch, quiet = t[1] .. '.' .. t[2], 0
if stored then
  local e, q = string.match(stored, '^(%S+) (%d+)$')
  if e then
    epoch, quiet = e, tonumber(q)
  end
end
local lost = 0
if known ~= '' and known ~= epoch then
  lost = 1
  quiet = math.max(quiet, now + ttl)
end
redis.call('SET', KEYS[4], epoch .. ' ' .. string.format('%d', quiet), 'EX', 86400)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', asking, '-inf', now)
for _, member in ipairs(gone) do
  redis.call('ZREM', waiting, member)
end
redis.call('ZREMRANGEBYSCORE', asking, '-inf', now)
local op = ARGV[1]
if op == 'acquire' then
  local member = ARGV[6]
  local held = redis.call('ZCARD', key)
  if not redis.call('ZSCORE', waiting, member) then
    redis.call('ZADD', waiting, now_us, member)
  end
  local ahead = redis.call('ZRANK', waiting, member)
  if now < quiet or held >= tonumber(ARGV[2]) or ahead >= tonumber(ARGV[2]) - held then
    redis.call('ZADD', asking, now + wait_ttl, member)
    redis.call('PEXPIRE', waiting, wait_ttl + 1000)
    redis.call('PEXPIRE', asking, wait_ttl + 1000)
    return {0, held, epoch, lost}
  end
  redis.call('ZREM', waiting, member)
  redis.call('ZREM', asking, member)
  redis.call('ZADD', key, now + ttl, member)
elseif op == 'renew' then
  for i = 6, #ARGV do
    redis.call('ZADD', key, now + ttl, ARGV[i])
  end
elseif op == 'release' then
  for i = 6, #ARGV do
    redis.call('ZREM', key, ARGV[i])
    redis.call('ZREM', waiting, ARGV[i])
    redis.call('ZREM', asking, ARGV[i])
  end
end
local held = redis.call('ZCARD', key)
if held > 0 then
  -- The set goes by itself once every lease in it has lapsed (and an
  -- empty one at once): a key's pool leaves nothing behind.
  redis.call('PEXPIRE', key, ttl + 1000)
end
return {1, held, epoch, lost}
