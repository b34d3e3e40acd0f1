-- election_common.lua: put in front of the election scripts that tell
-- observers of a change (election.go).
--
-- announce publishes the election record (all its fields, as a JSON
-- object of strings) on the election's channel.
local function announce(record, channel, pub)
  local flat = redis.call('hgetall', record)
  local m = {}
  for i = 1, #flat, 2 do
    m[flat[i]] = flat[i + 1]
  end
  redis.call(pub, channel, cjson.encode(m))
end
