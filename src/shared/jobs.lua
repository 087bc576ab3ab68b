-- drip's shared job limit in Redis (--share-jobs): a lease per running
-- job, in one sorted set scored by each lease's expiry (ms of the
-- server's clock), changed in one atomic step.
--
-- KEYS[1]  the leases: drip:{NAME}:jobs
-- ARGV[1]  "acquire", "renew" or "release"
-- ARGV[2]  the limit, N of --share-jobs
-- ARGV[3]  a lease's time to live, ms
-- ARGV[4..] the members: acquire one, renew or release any number
--
-- Returns {1, leases held after} when done, {0, leases held} when an
-- acquire found N held. Leases past their expiry are dropped first.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local op = ARGV[1]
if op == 'acquire' then
  local held = redis.call('ZCARD', key)
  if held >= tonumber(ARGV[2]) then
    return {0, held}
  end
  redis.call('ZADD', key, now + ttl, ARGV[4])
elseif op == 'renew' then
  for i = 4, #ARGV do
    redis.call('ZADD', key, now + ttl, ARGV[i])
  end
elseif op == 'release' then
  for i = 4, #ARGV do
    redis.call('ZREM', key, ARGV[i])
  end
end
local held = redis.call('ZCARD', key)
if held > 0 then
  -- The set goes by itself once every lease in it has lapsed.
  redis.call('PEXPIRE', key, ttl + 1000)
end
return {1, held}
