/**
 * The Lua scripts of a shared budget. Each runs atomically on the Redis server and reads the
 * server's clock (`TIME`), so the processes never compare their own clocks. Rates are units/min
 * of the whole budget; times are ms on the server's clock. Numbers go back as strings: Redis
 * truncates a Lua number to an integer on the way out.
 *
 * Keys (one hash tag, so a cluster keeps them on one slot):
 *   KEYS[1] `<prefix>{<name>}:state`    hash: generation, createdAt, rate, epoch, lastCutAt, cuts,
 *                                        pausedUntil, pauseFrom, pauseBanked, and the controller's
 *                                        books: version, lastChangeAt, rateBefore, measuredAtCut, waited,
 *                                        decreases ("before accepted since;..."), random, acceptedSinceCut
 *   KEYS[2] `<prefix>{<name>}:members`  zset: member id -> last heartbeat (server ms)
 *   KEYS[3] `<prefix>{<name>}:reports`  hash: member id -> "demand accepted measured" (units/min)
 *
 * The rules are written once in TypeScript (store.ts, memory-store.ts); these scripts mirror
 * them, and test/redis-store.test.ts runs both on the same sequences.
 */

import { DECREASES_KEPT } from './store.js';

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
  redis.call('HSET', KEYS[1], 'generation', candidate, 'createdAt', now, 'lastChangeAt', now)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return candidate
end
`;

/**
 * The controller's books as of now (store.ts: ControllerBooks, pauseSince, sinceIncrease), as a
 * list: version, rateBefore|'', measuredAtCut|'', sinceLastDecrease, pauseSinceLastDecrease,
 * sinceLastIncrease, waited (0|1), decreases|'', random|'', acceptedSinceCut. Also `changed()`: a
 * new version of the books.
 */
const BOOKS = `
local function num(field, default)
  local v = tonumber(redis.call('HGET', KEYS[1], field))
  if v == nil then return default end
  return v
end
local function cutAt()
  return num('lastCutAt', num('createdAt', now))
end
local function pauseSince(at)
  local untilAt = num('pausedUntil', 0)
  return num('pauseBanked', 0) + math.max(0, math.min(at, untilAt) - math.max(num('pauseFrom', 0), cutAt()))
end
local function books()
  local before = redis.call('HGET', KEYS[1], 'rateBefore') or ''
  local measured = redis.call('HGET', KEYS[1], 'measuredAtCut') or ''
  local pausedUntil = num('pausedUntil', 0)
  local sinceIncrease = now - math.max(num('lastChangeAt', now), math.min(pausedUntil, now))
  return { num('version', 0), before, measured, tostring(now - cutAt()), tostring(pauseSince(now)),
    tostring(sinceIncrease), num('waited', 0), redis.call('HGET', KEYS[1], 'decreases') or '',
    redis.call('HGET', KEYS[1], 'random') or '', tostring(num('acceptedSinceCut', 0)) }
end
local function changed()
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  redis.call('HSET', KEYS[1], 'lastChangeAt', now, 'waited', 0)
end
`;

const CLAMP = `
local function clamp(rate, minRate, maxRate)
  if not (rate >= minRate) then rate = minRate end
  if maxRate ~= nil and rate > maxRate then rate = maxRate end
  return rate
end
`;

/**
 * One heartbeat: registers the member, drops the members silent for longer than the timeout,
 * sets the member's proposal (a new whole rate computed from the books at one version) when the
 * books are still at that version, records this member's report, and returns the shared state
 * with the members' sums, this member's share and place, and the controller's books.
 *
 * ARGV: id, demand, accepted, measured, waited (0|1), memberTimeoutMs, floorFraction, initialRate|'',
 *   minRate, maxRate|'', ttlMs, candidateGeneration, proposalGeneration|'', proposalVersion|'',
 *   proposalRate|'', acceptedUnits
 * Returns: { rate|'', epoch, pauseRemainingMs, members, share|'', serverNow, generation, accepted,
 *   measured, index, proposed (0|1), books... }
 */
export const HEARTBEAT = `${NOW}${GENERATION}${CLAMP}${BOOKS}
local id = ARGV[1]
local demand = tonumber(ARGV[2])
local timeout = tonumber(ARGV[6])
local floorFraction = tonumber(ARGV[7])
local minRate = tonumber(ARGV[9])
local maxRate = tonumber(ARGV[10])
local ttl = tonumber(ARGV[11])
local gen = generation(ARGV[12], ttl)

redis.call('ZADD', KEYS[2], now, id)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - timeout)
if #dead > 0 then
  redis.call('ZREM', KEYS[2], unpack(dead))
  redis.call('HDEL', KEYS[3], unpack(dead))
end
redis.call('HSET', KEYS[3], id, ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])

local rate = tonumber(redis.call('HGET', KEYS[1], 'rate'))
if rate == nil and ARGV[8] ~= '' then rate = tonumber(ARGV[8]) end
local proposed = 0
if rate ~= nil then
  if ARGV[13] == gen and tonumber(ARGV[14]) == num('version', 0) then
    rate = tonumber(ARGV[15])
    proposed = 1
    changed()
  end
  rate = clamp(rate, minRate, maxRate)
  redis.call('HSET', KEYS[1], 'rate', rate)
end
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'waited', 1) end
local units = tonumber(ARGV[16]) or 0
if units > 0 then redis.call('HINCRBYFLOAT', KEYS[1], 'acceptedSinceCut', units) end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0
local pausedUntil = tonumber(redis.call('HGET', KEYS[1], 'pausedUntil')) or 0
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local members = #ids
table.sort(ids)
local index = 0
for i = 1, members do
  if ids[i] == id then index = i - 1 end
end

local demands = {}
local accepted = 0
local measured = 0
local all = redis.call('HVALS', KEYS[3])
for i = 1, #all do
  local d, a, m = string.match(all[i], '^(%S+) (%S+) (%S+)$')
  demands[i] = tonumber(d)
  accepted = accepted + tonumber(a)
  measured = measured + tonumber(m)
end

local share = ''
if rate ~= nil then
  local floor = rate * floorFraction / members
  local total = 0
  for i = 1, #demands do
    total = total + math.min(demands[i], rate) + floor
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
local reply = { rate, epoch, math.max(0, pausedUntil - now), members, share, now, gen, tostring(accepted),
  tostring(measured), index, proposed }
for _, v in ipairs(books()) do table.insert(reply, v) end
return reply
`;

/**
 * A throttle that cut locally asks to cut the whole budget. It cuts only when the throttled
 * request was sent in the current epoch (sent before the last cut: no) and the cooldown has
 * passed since the last cut, and only from the books the member computed the cut from (else it
 * answers `stale`: compute it again from the books it returns); then it sets the rate and the
 * books and bumps the epoch. A request sent in another generation counts as sent at epoch 0 of
 * this one (sentEpochIn in store.ts).
 *
 * ARGV: sentEpoch, rate, rateBefore, measured|'', cooldownMs, minRate, maxRate|'', ttlMs,
 *   sentGeneration|'', candidateGeneration, fromGeneration|'', fromVersion|'', record (packDecrease),
 *   random
 * Returns: { cut (0|1), stale (0|1), rate|'', epoch, generation, books... }
 */
export const CUT = `${NOW}${GENERATION}${CLAMP}${BOOKS}
local sentEpoch = tonumber(ARGV[1])
local cooldown = tonumber(ARGV[5])
local minRate = tonumber(ARGV[6])
local maxRate = tonumber(ARGV[7])
local ttl = tonumber(ARGV[8])
local gen = generation(ARGV[10], ttl)
if ARGV[9] ~= '' and ARGV[9] ~= gen then sentEpoch = 0 end

local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0
local lastCutAt = tonumber(redis.call('HGET', KEYS[1], 'lastCutAt'))
local cut = 0
local stale = 0
if sentEpoch == epoch and (lastCutAt == nil or now - lastCutAt >= cooldown) then
  if ARGV[11] == gen and tonumber(ARGV[12]) == num('version', 0) then
    redis.call('HSET', KEYS[1], 'rate', clamp(tonumber(ARGV[2]), minRate, maxRate), 'rateBefore', ARGV[3])
    if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'measuredAtCut')
    else redis.call('HSET', KEYS[1], 'measuredAtCut', ARGV[4]) end
    local cuts = {}
    for kept in string.gmatch(redis.call('HGET', KEYS[1], 'decreases') or '', '[^;]+') do
      table.insert(cuts, kept)
    end
    table.insert(cuts, ARGV[13])
    while #cuts > ${DECREASES_KEPT} do table.remove(cuts, 1) end
    redis.call('HSET', KEYS[1], 'decreases', table.concat(cuts, ';'), 'random', ARGV[14], 'acceptedSinceCut', 0)
    epoch = epoch + 1
    redis.call('HSET', KEYS[1], 'epoch', epoch, 'lastCutAt', now, 'pauseBanked', 0)
    redis.call('HINCRBY', KEYS[1], 'cuts', 1)
    changed()
    redis.call('PEXPIRE', KEYS[1], ttl)
    cut = 1
  else
    stale = 1
  end
end
local rate = redis.call('HGET', KEYS[1], 'rate') or ''
local reply = { cut, stale, rate, epoch, gen }
for _, v in ipairs(books()) do table.insert(reply, v) end
return reply
`;

/**
 * A Retry-After seen by one member pauses all: the shared pause ends at the later of its current
 * end and now + ms.
 *
 * ARGV: ms, ttlMs, candidateGeneration
 * Returns: the remaining pause in ms.
 */
export const PAUSE = `${NOW}${GENERATION}${BOOKS}
local ms = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
generation(ARGV[3], ttl)
local pausedUntil = tonumber(redis.call('HGET', KEYS[1], 'pausedUntil')) or 0
if now + ms > pausedUntil then
  if pausedUntil <= now then
    -- A new pause: bank the last one's part after the last cut.
    redis.call('HSET', KEYS[1], 'pauseBanked', pauseSince(now), 'pauseFrom', now)
  end
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
