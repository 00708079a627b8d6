-- src/fair.c's fair_acquire at d3cd759 with its purge of dead heads taken out:
-- a synthetic put-back (never a release) for sim.finds_a_fair_queue_never_purged.
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
local function notify(pub, head)
  redis.call(pub, KEYS[4] .. ':' .. head, '0')
end
local function purge(now)
  local n = 0
  while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then break end
    local s = redis.call('zscore', KEYS[3], head)
    if s and tonumber(s) > now then break end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    n = n + 1
  end
  return n
end
local function wake_new_head(pub, me)
  if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head and head ~= me then notify(pub, head) end
  end
end
local function shrink(rest, wait, now)
  for i = 1, #rest do
    if redis.call('zscore', KEYS[3], rest[i]) then
      local sc = tonumber(redis.call('zincrby', KEYS[3], -wait, rest[i]))
      if sc < now + wait then
        redis.call('zadd', KEYS[3], now + wait, rest[i])
      end
    end
  end
end
local function take(field, lease, target, wait, now)
  local kd = kind_of(KEYS[1])
  if kd ~= 'none' and kd ~= 'mutex' then
    if target ~= '1' then return -3 end
    return false
  end
  if target ~= '1' then
    local c = tonumber(redis.call('hget', KEYS[1], field))
    if c then
      extend(KEYS[1], lease)
      if c < tonumber(target) then
        redis.call('hset', KEYS[1], field, target)
      end
      return true
    end
    return -3
  end
  if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head and head ~= field then return false end
    if head then redis.call('lpop', KEYS[2]) end
    redis.call('zrem', KEYS[3], field)
    shrink(redis.call('zrange', KEYS[3], 0, -1), wait, now)
    redis.call('hset', KEYS[1], field, 1)
    pexpire_new(KEYS[1], lease)
    return true
  end
  if redis.call('hexists', KEYS[1], field) == 1 then
    extend(KEYS[1], lease)
    redis.call('lrem', KEYS[2], 0, field)
    redis.call('zrem', KEYS[3], field)
    return true
  end
  return false
end
local function hint(now)
  local kd = kind_of(KEYS[1])
  if kd ~= 'none' and kd ~= 'mutex' then return busy_ttl(KEYS[1]) end
  local p = redis.call('pttl', KEYS[1])
  if p >= -1 then return p end
  local head = redis.call('lindex', KEYS[2], 0)
  local s = head and redis.call('zscore', KEYS[3], head)
  if s then return math.max(1, math.min(1000, tonumber(s) - now)) end
  return 1
end
if redis.call('exists', KEYS[5]) == 1 then return -4 end
local now = tonumber(ARGV[4])
local wait = tonumber(ARGV[3])
local got = take(ARGV[2], ARGV[1], ARGV[5], wait, now)
if got == true then return nil end
if got == -3 then return -3 end
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if not mine then
  if redis.call('zadd', KEYS[3], now + wait, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
  end
elseif tonumber(mine) < now + wait then
  redis.call('zadd', KEYS[3], now + wait, ARGV[2])
end
return hint(now)
