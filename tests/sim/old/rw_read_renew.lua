local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if not c then return 0 end
for i = c, 1, -1 do
  redis.call('pexpire', KEYS[2] .. ':' .. i, ARGV[1])
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return 1
