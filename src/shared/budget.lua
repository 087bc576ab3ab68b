-- A shared budget's window count (--budget with --share): add ARGV[4]
-- (what a drip granted itself alone) to the count KEYS[1] of a window and
-- take ARGV[5] from it (what a leaving drip was granted and did not
-- send; the count never below 0), then add up to ARGV[2] more keeping it
-- within ARGV[1]; expire it at ARGV[3] (ms since the Unix epoch).
-- KEYS[2] holds the budgets' epoch, made when missing and kept a day past
-- the latest window's expiry: a caller that knew another (ARGV[6]; ""
-- none yet) finds the count lost (flushed, restarted, evicted) and first
-- adds back what it holds of the window (ARGV[7]).
-- Returns what was added beyond what was owed, the count after, the
-- epoch and whether the count was lost (1) since the caller's epoch.
local n = tonumber(ARGV[1])
local ask = tonumber(ARGV[2])
local owed = tonumber(ARGV[4] or '0')
local back = tonumber(ARGV[5] or '0')
local known = ARGV[6] or ''
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  local t = redis.call('TIME')
  epoch = t[1] .. '.' .. t[2]
  redis.call('SET', KEYS[2], epoch)
end
local lost = 0
if known ~= '' and known ~= epoch then
  lost = 1
  owed = owed + tonumber(ARGV[7] or '0')
end
local keep = tonumber(ARGV[3]) + 86400000
local ttl = redis.call('PTTL', KEYS[2])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ttl < 0 or now_ms + ttl < keep then
  redis.call('PEXPIREAT', KEYS[2], keep)
end
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local was = c
c = math.max(c + owed - back, 0)
if c ~= was then redis.call('SET', KEYS[1], c) end
local g = math.max(math.min(ask, n - c), 0)
if g > 0 then c = redis.call('INCRBY', KEYS[1], g) end
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return {g, c, epoch, lost}
