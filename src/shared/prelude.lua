-- What both of drip's scripts (script.lua, keys.lua) begin with: each is
-- sent to the server as this prelude and its own text, in one chunk.
--
-- A stored field as a number, or nil when it is absent or not a number
-- drip writes: a field drip did not write counts as absent. drip's
-- numbers are exact in Lua's (under 2^53: a time 104 days ahead, in ns).
local function number_of(x)
  local v = tonumber(x)
  if v and v > -2^53 and v < 2^53 then
    return v
  end
  return nil
end
-- The call: its operation (ARGV[1]) and its time, the server's TIME, or
-- (ARGV[2] not '-1', as the tests give) ARGV[2] seconds and ARGV[3] ns.
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
