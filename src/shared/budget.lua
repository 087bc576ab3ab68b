-- A shared budget's window count (--budget with --share): add ARGV[4]
-- (what a drip granted itself alone) to the count KEYS[1] of a window and
-- take ARGV[5] from it (what a leaving drip was granted and did not
-- send; the count never below 0), then add up to ARGV[2] more keeping it
-- within ARGV[1]; expire it at ARGV[3] (ms since the Unix epoch).
-- Returns what was added beyond what was owed and the count after.
local n = tonumber(ARGV[1])
local ask = tonumber(ARGV[2])
local owed = tonumber(ARGV[4] or '0')
local back = tonumber(ARGV[5] or '0')
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local was = c
c = math.max(c + owed - back, 0)
if c ~= was then redis.call('SET', KEYS[1], c) end
local g = math.max(math.min(ask, n - c), 0)
if g > 0 then c = redis.call('INCRBY', KEYS[1], g) end
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return {g, c}
