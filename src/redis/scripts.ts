/**
 * The Lua scripts of a shared budget. Each runs atomically on the Redis server and reads the
 * server's clock (`TIME`), so the processes never compare their own clocks. Rates are units/min
 * of the whole budget; times are ms on the server's clock. Numbers go back as strings: Redis
 * truncates a Lua number to an integer on the way out.
 *
 * Keys (one hash tag, so a cluster keeps them on one slot):
 *   KEYS[1] `<prefix>{<name>}:state`    hash: generation, rate, epoch, lastCutAt, cuts, pausedUntil
 *   KEYS[2] `<prefix>{<name>}:members`  zset: member id -> last heartbeat (server ms)
 *   KEYS[3] `<prefix>{<name>}:demand`   hash: member id -> demand (units/min)
 */

const NOW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`;

/**
 * The state's generation: a random id made when the state is created. A script that finds no
 * state (never made, expired, lost with a restart, evicted, flushed) creates it with the
 * candidate id the client sent (random, made by the client: Lua's random is not) and the ttl.
 */
const GENERATION = `
local function generation(candidate, ttl)
  local gen = redis.call('HGET', KEYS[1], 'generation')
  if gen then return gen end
  redis.call('HSET', KEYS[1], 'generation', candidate)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return candidate
end
`;

const CLAMP = `
local function clamp(rate, minRate, maxRate)
  if rate < minRate then rate = minRate end
  if maxRate ~= nil and rate > maxRate then rate = maxRate end
  return rate
end
`;

/**
 * One heartbeat: registers the member, drops the members silent for longer than the timeout,
 * records this member's demand, adds its controller's proposed change (`delta`, clamped) to the
 * whole rate, and returns the shared state with this member's share of the rate.
 *
 * ARGV: id, demand, delta, memberTimeoutMs, floorFraction, initialRate|'', minRate, maxRate|'', ttlMs,
 *   candidateGeneration
 * Returns: { rate|'', epoch, pauseRemainingMs, members, share|'', serverNow, generation }
 */
export const HEARTBEAT = `${NOW}${GENERATION}${CLAMP}
local id = ARGV[1]
local demand = tonumber(ARGV[2])
local delta = tonumber(ARGV[3])
local timeout = tonumber(ARGV[4])
local floorFraction = tonumber(ARGV[5])
local minRate = tonumber(ARGV[7])
local maxRate = tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
local gen = generation(ARGV[10], ttl)

redis.call('ZADD', KEYS[2], now, id)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - timeout)
if #dead > 0 then
  redis.call('ZREM', KEYS[2], unpack(dead))
  redis.call('HDEL', KEYS[3], unpack(dead))
end
redis.call('HSET', KEYS[3], id, demand)

local rate = tonumber(redis.call('HGET', KEYS[1], 'rate'))
if rate == nil and ARGV[6] ~= '' then rate = tonumber(ARGV[6]) end
if rate ~= nil then
  rate = clamp(rate + delta, minRate, maxRate)
  redis.call('HSET', KEYS[1], 'rate', rate)
end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0
local pausedUntil = tonumber(redis.call('HGET', KEYS[1], 'pausedUntil')) or 0
local members = redis.call('ZCARD', KEYS[2])

local share = ''
if rate ~= nil then
  local floor = rate * floorFraction / members
  local total = 0
  local all = redis.call('HVALS', KEYS[3])
  for i = 1, #all do
    total = total + math.min(tonumber(all[i]), rate) + floor
  end
  local own = math.min(demand, rate) + floor
  if total > 0 then share = tostring(rate * own / total) else share = tostring(rate / members) end
  rate = tostring(rate)
else
  rate = ''
end

redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return { rate, epoch, math.max(0, pausedUntil - now), members, share, now, gen }
`;

/**
 * A throttle that cut locally asks to cut the whole budget. It cuts only when the throttled
 * request was sent in the current epoch (sent before the last cut: no) and the cooldown has
 * passed since the last cut; then it bumps the epoch. A request sent in another generation
 * counts as sent at epoch 0 of this one (sentEpochIn in store.ts).
 *
 * ARGV: sentEpoch, ratio|'', absoluteRate|'', cooldownMs, minRate, maxRate|'', ttlMs,
 *   sentGeneration|'', candidateGeneration
 * Returns: { cut (0|1), rate|'', epoch, generation }
 */
export const CUT = `${NOW}${GENERATION}${CLAMP}
local sentEpoch = tonumber(ARGV[1])
local ratio = tonumber(ARGV[2])
local absolute = tonumber(ARGV[3])
local cooldown = tonumber(ARGV[4])
local minRate = tonumber(ARGV[5])
local maxRate = tonumber(ARGV[6])
local ttl = tonumber(ARGV[7])
local gen = generation(ARGV[9], ttl)
if ARGV[8] ~= '' and ARGV[8] ~= gen then sentEpoch = 0 end

local rate = tonumber(redis.call('HGET', KEYS[1], 'rate'))
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0
local lastCutAt = tonumber(redis.call('HGET', KEYS[1], 'lastCutAt'))
local cut = 0
if sentEpoch == epoch and (lastCutAt == nil or now - lastCutAt >= cooldown) then
  if rate == nil then rate = absolute elseif ratio ~= nil then rate = rate * ratio end
  if rate ~= nil then
    rate = clamp(rate, minRate, maxRate)
    redis.call('HSET', KEYS[1], 'rate', rate)
  end
  epoch = epoch + 1
  redis.call('HSET', KEYS[1], 'epoch', epoch, 'lastCutAt', now)
  redis.call('HINCRBY', KEYS[1], 'cuts', 1)
  redis.call('PEXPIRE', KEYS[1], ttl)
  cut = 1
end
if rate == nil then rate = '' else rate = tostring(rate) end
return { cut, rate, epoch, gen }
`;

/**
 * A Retry-After seen by one member pauses all: the shared pause ends at the later of its current
 * end and now + ms.
 *
 * ARGV: ms, ttlMs, candidateGeneration
 * Returns: the remaining pause in ms.
 */
export const PAUSE = `${NOW}${GENERATION}
local ms = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
generation(ARGV[3], ttl)
local pausedUntil = tonumber(redis.call('HGET', KEYS[1], 'pausedUntil')) or 0
if now + ms > pausedUntil then
  pausedUntil = now + ms
  redis.call('HSET', KEYS[1], 'pausedUntil', pausedUntil)
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return math.max(0, pausedUntil - now)
`;

/** A member leaving on close: drops it from the members and the demand at once. ARGV: id */
export const LEAVE = `
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('ZCARD', KEYS[2])
`;
