local function pexpire_new(k, ms)
  local r = redis.pcall('pexpire', k, ms)
  if type(r) == 'table' and r.err then
    redis.call('del', k)
    error(r)
  end
end
local function extend(k, ms)
  if redis.call('pttl', k) < tonumber(ms) then
    redis.call('pexpire', k, ms)
  end
end
local function remaining_ttl(k, l)
  l = tonumber(l)
  if l > 0 then redis.call('pexpire', k, l)
  elseif l < 0 then extend(k, -l) end
end
local function kind_of(k)
  local t = redis.call('type', k)['ok']
  if t == 'none' then return t end
  if redis.call('hexists', k, 'mode') == 1 then return 'rwlock' end
  return 'mutex'
end
local function busy_ttl(k)
  local p = redis.call('pttl', k)
  if p < 0 then return 1000 end
  return p
end
if redis.call('exists', KEYS[3]) == 1 then return -4 end
local n = tonumber(ARGV[4])
local kd = kind_of(KEYS[1])
if kd ~= 'none' and kd ~= 'rwlock' then
  if n ~= 1 then return -3 end
  return busy_ttl(KEYS[1])
end
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  if n ~= 1 then return -3 end
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  pexpire_new(KEYS[1], ARGV[1])
  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
  if n > 1 and not c then
    return -3
  end
  if not c or c < n then redis.call('hset', KEYS[1], ARGV[2], n) end
  local tk = KEYS[2] .. ':' .. n
  if redis.call('pttl', tk) < tonumber(ARGV[1]) then
    redis.call('set', tk, 1, 'px', ARGV[1])
  end
  local p = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(p, tonumber(ARGV[1])))
  return nil
end
if n > 1 then return -3 end
return redis.call('pttl', KEYS[1])
