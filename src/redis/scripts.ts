/**
 * The Lua scripts of a shared budget. Each runs atomically on the Redis server and reads the
 * server's clock (`TIME`), so the processes never compare their own clocks. Rates are units/min
 * of the whole budget; times are ms on the server's clock. Numbers go back as strings: Redis
 * truncates a Lua number to an integer on the way out.
 *
 * Keys (one hash tag, so a cluster keeps them on one slot):
 *   KEYS[1] `<prefix>{<name>}:state`    hash: generation, createdAt, rate, epoch, lastCutAt, cuts,
 *                                        pausedUntil, pauseFrom, pauseBanked, seeded, seededAt (SEEDED), and the controller's
 *                                        books: version, lastChangeAt, rateBefore, measuredAtCut, waited,
 *                                        decreases ("before accepted since;..."), random, acceptedSinceCut
 *   KEYS[2] `<prefix>{<name>}:members`  zset: member id -> last heartbeat (server ms)
 *   KEYS[3] `<prefix>{<name>}:reports`  hash: member id -> "demand accepted measured timeout"
 *                                        (units/min; the member's own memberTimeout, ms)
 *
 * The rules are written once in TypeScript (store.ts, memory-store.ts); these scripts mirror
 * them, and test/redis-store.test.ts runs both on the same sequences.
 */

import { CLOCK_BEHIND_BOUND_MS, CLOCK_SLACK_MS, DECREASES_KEPT, STORED_PAUSE_BOUND_MS } from './store.js';

/** Members removed per command: Lua's `unpack` takes at most 7,999 values (LUAI_MAXCSTACK). */
const DEAD_CHUNK = 1_000;

const NOW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`;

/**
 * The state's generation: a random id made when the state is created. A script that finds no
 * state (never made, expired, lost with a restart, evicted, flushed) creates it with the
 * candidate id the client sent (random, made by the client: Lua's random is not) and the ttl.
 * The ttl is passed to PEXPIRE as the client sent it (whole ms), never as a Lua number: Redis
 * writes a large Lua number in exponent form ("1e+15"), which PEXPIRE refuses.
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
  redis.call('HSET', KEYS[1], 'version', string.format('%d', num('version', 0) + 1))
  redis.call('HSET', KEYS[1], 'lastChangeAt', now, 'waited', 0)
end
`;

/**
 * What every script reads back is checked before it is used (a member checks the answers again:
 * store.ts, checkHeartbeat): a key of another type than the budget's is deleted; a state hash
 * with a field that fails its check (not a finite number, out of its bounds, a time more than a
 * day in the future, a pause that ends more than the caller's maxPause and a day from now, a cut
 * record that is not three numbers), or without its generation, is deleted, so the script
 * creates a fresh generation, as after a lost state (a pause longer than the caller's own
 * maxPause is not broken: members with another maxPause may share the budget, and each caps the
 * pause it takes); a time or a member's last heartbeat ahead of the server's clock by more than a
 * second, and less than a day, is set to now (after a failover to a server whose clock is behind,
 * the state and its learned rate are kept), a member's a day or more ahead is dropped; a report
 * that is not three finite numbers >= 0 and a timeout > 0 (or no timeout: a report of the build
 * before, its member judged by the caller's timeout), or whose member is not live while the members
 * key is there, is dropped. Each repair is listed in `repaired` as "key field", answered to the
 * caller (which warns once). No value is answered: only the key and the field. A key missing
 * (evicted, flushed, expired) is no repair: a missing state is made again (a fresh generation),
 * and the reports of members lost with the members key are dropped and counted (`membersLost`).
 *
 * A state without its generation (the field deleted by hand: every script writes it first) was
 * taken for a new generation that went on at the old epoch and books: a 429 of a request sent
 * before counts as sent at a new generation's start (epoch 0, sentEpochIn in store.ts), so none
 * of the burst in flight cut the budget, and their local cuts were undone. The memory store
 * cannot hold such a state.
 */
const CHECK = `
local repaired = {}
local SLACK = ${CLOCK_SLACK_MS}
local BEHIND = ${CLOCK_BEHIND_BOUND_MS}
local function finite(v) return v ~= nil and v == v and v ~= math.huge and v ~= -math.huge end
local function atLeast0(text)
  local v = tonumber(text)
  return finite(v) and v >= 0
end
-- A count up to 2^53-1: past it a double's +1 no longer moves it (one cut per epoch), and past
-- 2^63 Redis answers it as -2^63 (every cut refused as sent in another epoch, every proposal stale).
local function count(text)
  local v = tonumber(text)
  return finite(v) and v >= 0 and v <= ${Number.MAX_SAFE_INTEGER} and v == math.floor(v)
end
local function past(text)
  local v = tonumber(text)
  return finite(v) and v >= 0 and v <= now + BEHIND
end
local function cutRecord(text)
  local a, b, c = string.match(text, '^(%S+) (%S+) (%S+)$')
  return a ~= nil and atLeast0(a) and atLeast0(b) and (c == '-' or atLeast0(c))
end
local function decreasesOk(text)
  if text == '' then return true end
  local n = 0
  for item in string.gmatch(text .. ';', '([^;]*);') do
    n = n + 1
    if n > ${DECREASES_KEPT} or not cutRecord(item) then return false end
  end
  return true
end
local function stateRules(maxPause)
  return {
    generation = function(v) return #v > 0 end,
    createdAt = past, lastChangeAt = past, lastCutAt = past, pauseFrom = past, seededAt = past,
    pausedUntil = function(v)
      local x = tonumber(v)
      return finite(x) and x >= 0 and x <= now + math.max(maxPause, ${STORED_PAUSE_BOUND_MS}) + SLACK
    end,
    rate = function(v)
      local x = tonumber(v)
      return finite(x) and x > 0
    end,
    epoch = count, cuts = count, version = count, seeded = count,
    pauseBanked = atLeast0, acceptedSinceCut = atLeast0, rateBefore = atLeast0, measuredAtCut = atLeast0,
    waited = function(v) return v == '0' or v == '1' end,
    random = function(v)
      local x = tonumber(v)
      return finite(x) and x >= 0 and x < 1
    end,
    decreases = decreasesOk,
  }
end
-- The keys' types, then the state's fields; returns nothing (the repairs are in \`repaired\`).
local function check(maxPause)
  local want = { 'hash', 'zset', 'hash' }
  for i = 1, 3 do
    local t = redis.call('TYPE', KEYS[i])['ok']
    if t ~= 'none' and t ~= want[i] then
      redis.call('DEL', KEYS[i])
      table.insert(repaired, KEYS[i] .. ' (a ' .. t .. ', not a ' .. want[i] .. ')')
    end
  end
  local rules = stateRules(maxPause)
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    local rule = rules[fields[i]]
    if rule ~= nil and not rule(fields[i + 1]) then
      redis.call('DEL', KEYS[1])
      table.insert(repaired, KEYS[1] .. ' ' .. fields[i])
      break
    end
  end
  if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[1], 'generation') == 0 then
    redis.call('DEL', KEYS[1])
    table.insert(repaired, KEYS[1] .. ' generation')
  end
  -- Times ahead of this clock by more than the slack (the server's clock is behind the one that
  -- wrote them: a failover, a restore) are now; the state, and its learned rate, are kept.
  -- seededAt with them: left ahead, a member heard since the seeding (its time made now too)
  -- would not be heard since it began until this clock caught up (SEEDED).
  for _, field in ipairs({ 'createdAt', 'lastChangeAt', 'lastCutAt', 'pauseFrom', 'seededAt' }) do
    local at = tonumber(redis.call('HGET', KEYS[1], field))
    if at ~= nil and at > now + SLACK then redis.call('HSET', KEYS[1], field, now) end
  end
  local ahead = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. (now + SLACK), '+inf')
  for i = 1, #ahead do
    local at = tonumber(redis.call('ZSCORE', KEYS[2], ahead[i]))
    if at ~= nil and at <= now + BEHIND then
      redis.call('ZADD', KEYS[2], now, ahead[i])
    else
      redis.call('ZREM', KEYS[2], ahead[i])
      table.insert(repaired, KEYS[2] .. ' ' .. ahead[i])
    end
  end
end
`;

/**
 * The members' reports, read and parsed once per heartbeat: the timeouts the dead members are
 * judged by, the check of each report, and the sums all come from one HGETALL.
 */
const REPORTS = `
-- A member's timeout in its report: a finite number of ms > 0.
local function timeoutOk(text)
  local v = tonumber(text)
  return finite(v) and v > 0
end
-- A report's fields: demand, accepted, measured, and the member's timeout; a report of a build
-- from before members sent their timeouts has three fields (its timeout nil: its member is judged
-- by the caller's), so that a rolling deploy keeps both builds' reports.
local function parseReport(text)
  local d, a, m, t = string.match(text, '^(%S+) (%S+) (%S+) (%S+)$')
  if d == nil then d, a, m = string.match(text, '^(%S+) (%S+) (%S+)$') end
  return d, a, m, t
end
-- The reports as stored, in the hash's order, each parsed: { id, ok, d, a, m, timeout }; ok:
-- three finite numbers >= 0 and a timeout > 0 or none. \`timeout\`: the report's timeout when
-- the report is whole (nil otherwise: its member is judged by the caller's, as a missing one's).
local function readReports()
  local all = redis.call('HGETALL', KEYS[3])
  local list = {}
  for i = 1, #all, 2 do
    local d, a, m, t = parseReport(all[i + 1])
    local ok = d ~= nil and atLeast0(d) and atLeast0(a) and atLeast0(m) and (t == nil or timeoutOk(t))
    local timeout = nil
    if ok and t ~= nil then timeout = tonumber(t) end
    table.insert(list, { id = all[i], ok = ok, d = d, a = a, m = m, timeout = timeout })
  end
  return list
end
`;

/**
 * `seeded`: the version at which the rate was last set from what a member knew rather than by
 * the budget's controller: offered with a heartbeat into a state with no rate (made again after it
 * was lost: a member's initialRate is its initial rate or the rate of its last heartbeat), or cut
 * into one. While it equals `version` (no proposal since), a heartbeat keeps the LOWEST rate a
 * member offers, and a cut whose member cut from a higher rate than the state's cuts from the
 * state's, by the member's factor: a member of a slower heartbeat, or back from a partition, knows
 * a rate the others may have cut since, and its rate can only lower what the others knew, never
 * raise it (it made the state again at 6,000 where the others knew 1,441). Lowering the rate bumps
 * the version, so a proposal computed from the higher rate is stale.
 *
 * It ends at the first proposal, or at the heartbeat of a member already heard since it began
 * (`seededAt`, server ms; a state without it: at any member heard before), once no live member
 * was last heard before it began: by then every member has offered what it knew (the :state
 * evicted alone, a member back from a partition beating every second was heard again, or
 * proposed 6,120 from the 6,000 it seeded, before one beating every 10 s offered the 1,441 it
 * knew, and the 6,000 it offered stayed; a proposal before then is taken, and the state stays
 * seeded at its version); with the members lost too, every member beating as often or more has
 * offered it, and a slower member's rate is the older (not one back from a partition beating more
 * often than the others: it ends it at the rate it knew before). A member silent since is dropped
 * after its timeout, so the seeding lasts at most that long. A budget no proposal changes (every
 * member's demand below its share) would otherwise stay seeded for as long as it lives, and a
 * member joining ten minutes later with an initialUnitsPerMinute of 60 pulled the 6,000 every
 * member shared down to 60. Older builds' scripts ignore both fields (no check rule, never read),
 * and their proposals and cuts bump the version, which ends it: a budget shared across a rolling
 * deploy is never held at a seeded rate.
 */
const SEEDED = `
local function isSeeded()
  local s = tonumber(redis.call('HGET', KEYS[1], 'seeded'))
  return s ~= nil and s == num('version', 0)
end
-- Seeded at this version; \`from\`: when it begins (nil: it goes on, from when it began).
local function seed(from)
  redis.call('HSET', KEYS[1], 'seeded', string.format('%d', num('version', 0)))
  if from ~= nil then redis.call('HSET', KEYS[1], 'seededAt', from) end
end
local function unseed()
  redis.call('HDEL', KEYS[1], 'seeded', 'seededAt')
end
-- No live member was last heard before the seeding began (the dead are dropped first).
local function allHeardSinceSeeded()
  local at = tonumber(redis.call('HGET', KEYS[1], 'seededAt')) or 0
  return redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. string.format('%d', at)) == 0
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
 * One heartbeat: registers the member, drops the members silent for longer than their own
 * timeouts (each member's, sent with its report; a member whose report is missing or broken is
 * judged by this caller's), sets the member's proposal (a new whole rate computed from the books
 * at one version) when the books are still at that version, records this member's report (with
 * its timeout), and returns the shared state with the members' sums, this member's share and
 * place, and the controller's books. The reports hash is read once (HGETALL), parsed once: the
 * timeouts the members are judged by, the check of each report and the sums all come from it.
 *
 * ARGV: id, demand, accepted, measured, waited (0|1), memberTimeoutMs, floorFraction, initialRate|'',
 *   minRate, maxRate|'', ttlMs, candidateGeneration, proposalGeneration|'', proposalVersion|'',
 *   proposalRate|'', acceptedUnits, maxPauseMs
 * Returns: { rate|'', epoch, pauseRemainingMs, members, share|'', serverNow, generation, accepted,
 *   measured, index, proposed (0|1), books..., repaired, longestMemberTimeoutMs, rejoined (0|1),
 *   unreported (live members without a report), droppedUnreported (members dropped now without a
 *   report), membersLost (well-formed reports dropped because the members key was missing) }
 */
export const HEARTBEAT = `${NOW}${CHECK}${REPORTS}${GENERATION}${CLAMP}${BOOKS}${SEEDED}
local id = ARGV[1]
local demand = tonumber(ARGV[2])
local timeout = tonumber(ARGV[6])
local floorFraction = tonumber(ARGV[7])
local minRate = tonumber(ARGV[9])
local maxRate = tonumber(ARGV[10])
local ttl = ARGV[11]
check(tonumber(ARGV[17]))
local gen = generation(ARGV[12], ttl)
-- No members key (evicted alone, as allkeys-lru may; deleted): the reports left are those of
-- members that join again at their next heartbeats, not a broken store (\`membersLost\`).
local membersMissing = redis.call('EXISTS', KEYS[2]) == 0

-- Not among the members (dropped after its silence, or the members lost): it joins again.
local rejoined = 0
-- When this member was last heard (nil: not among the members), for SEEDED's end.
local heardAt = tonumber(redis.call('ZSCORE', KEYS[2], id))
if heardAt == nil then rejoined = 1 end
redis.call('ZADD', KEYS[2], now, id)
local reports = readReports()
-- Each member is judged by the timeout it sent with its report (members of one budget may beat at
-- different intervals, each timeout fitting its own heartbeat), this caller's when it has none.
local timeouts = {}
-- The members with a whole report: one without (its report lost or broken) dropped now may still
-- be sending, judged by this caller's timeout, not its own (\`droppedUnreported\`).
local reported = {}
for _, r in ipairs(reports) do
  if r.timeout ~= nil then timeouts[r.id] = r.timeout end
  if r.ok then reported[r.id] = true end
end
local droppedUnreported = 0
local dead = {}
local gone = {}
local live = {}
-- The live members' ids: the set's members once the dead are dropped (read once).
local ids = {}
local seen = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #seen, 2 do
  local at = tonumber(seen[i + 1]) or -math.huge
  if at <= now - (timeouts[seen[i]] or timeout) then
    table.insert(dead, seen[i])
    gone[seen[i]] = true
    if not reported[seen[i]] then droppedUnreported = droppedUnreported + 1 end
  else
    live[seen[i]] = true
    table.insert(ids, seen[i])
  end
end
-- In chunks: Lua's unpack takes at most a few thousand values, and a fleet of short-lived
-- processes that never left can leave more members than that.
for i = 1, #dead, ${DEAD_CHUNK} do
  local last = math.min(i + ${DEAD_CHUNK - 1}, #dead)
  redis.call('ZREM', KEYS[2], unpack(dead, i, last))
  redis.call('HDEL', KEYS[3], unpack(dead, i, last))
end
-- The reports left after the dead members were dropped: each one broken, or whose member is not
-- live, is deleted (listed as repaired; one whose member was lost with the members key, counted
-- in \`membersLost\`); the others are kept, in the hash's order, and this member's own report
-- takes its place among them (the end, when it had none or a broken one).
local report = ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[6]
-- This member's own figures as sent (its timeout is \`timeout\`, the longest's start below).
local own = { id = id, d = ARGV[2], a = ARGV[3], m = ARGV[4] }
local kept = {}
local placed = false
local membersLost = 0
for _, r in ipairs(reports) do
  if not gone[r.id] then
    if r.ok and not live[r.id] and membersMissing then
      redis.call('HDEL', KEYS[3], r.id)
      membersLost = membersLost + 1
    elseif not r.ok or not live[r.id] then
      redis.call('HDEL', KEYS[3], r.id)
      table.insert(repaired, KEYS[3] .. ' ' .. r.id)
    elseif r.id == id then
      table.insert(kept, own)
      placed = true
    else
      table.insert(kept, r)
    end
  end
end
if not placed then table.insert(kept, own) end
redis.call('HSET', KEYS[3], id, report)

local rate = tonumber(redis.call('HGET', KEYS[1], 'rate'))
local offered = nil
if ARGV[8] ~= '' then offered = clamp(tonumber(ARGV[8]), minRate, maxRate) end
-- A member heard since the seeding began is heard again, and no live member was last heard
-- before it began: it ends (SEEDED).
if isSeeded() and heardAt ~= nil and heardAt >= (tonumber(redis.call('HGET', KEYS[1], 'seededAt')) or 0)
  and allHeardSinceSeeded() then
  unseed()
end
if rate == nil and offered ~= nil then
  rate = offered
  seed(now)
elseif rate ~= nil and offered ~= nil and offered < rate and isSeeded() then
  -- The lowest rate a member offers (SEEDED); a proposal from the higher one is stale.
  rate = offered
  redis.call('HSET', KEYS[1], 'version', string.format('%d', num('version', 0) + 1))
  seed(nil)
end
local proposed = 0
if rate ~= nil then
  if ARGV[13] == gen and tonumber(ARGV[14]) == num('version', 0) then
    rate = tonumber(ARGV[15]) or rate
    proposed = 1
    -- A proposal ends the seeding once every live member was heard since it began (SEEDED).
    local seeded = isSeeded()
    changed()
    if seeded and not allHeardSinceSeeded() then seed(nil) else unseed() end
  end
  rate = clamp(rate, minRate, maxRate)
  redis.call('HSET', KEYS[1], 'rate', rate)
end
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'waited', 1) end
local units = tonumber(ARGV[16]) or 0
if units > 0 then redis.call('HSET', KEYS[1], 'acceptedSinceCut', tostring(num('acceptedSinceCut', 0) + units)) end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0
local pausedUntil = tonumber(redis.call('HGET', KEYS[1], 'pausedUntil')) or 0
local members = #ids
table.sort(ids)
local index = 0
for i = 1, members do
  if ids[i] == id then index = i - 1 end
end

local demands = {}
local accepted = 0
local measured = 0
-- The longest memberTimeout of the live members (a report without one: this caller's).
local longest = timeout
for i, r in ipairs(kept) do
  demands[i] = tonumber(r.d)
  accepted = accepted + tonumber(r.a)
  measured = measured + tonumber(r.m)
  if r.timeout ~= nil and r.timeout > longest then longest = r.timeout end
end

local share = ''
if rate ~= nil then
  local floor = rate * floorFraction / members
  local total = 0
  for i = 1, #demands do
    total = total + math.min(demands[i], rate) + floor
  end
  -- A live member without a report counts as one with no demand.
  total = total + math.max(0, members - #demands) * floor
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
table.insert(reply, repaired)
table.insert(reply, string.format('%.17g', longest))
table.insert(reply, rejoined)
table.insert(reply, math.max(0, members - #kept))
table.insert(reply, droppedUnreported)
table.insert(reply, membersLost)
return reply
`;

/**
 * A throttle that cut locally asks to cut the whole budget. It cuts only when the throttled
 * request was sent in the current epoch (sent before the last cut: no) and the cooldown has
 * passed since the last cut, and only from the books the member computed the cut from (else it
 * answers `stale`: compute it again from the books it returns), or into a state with no rate
 * (nothing to be stale against: a state made again after it was lost starts from the cutting
 * member's known rate times the cut, and stays seeded: SEEDED); into a seeded state, from the
 * lowest rate known (the state's, when the member cut from a higher one); then it sets the rate
 * and the books and bumps the epoch. A request sent in another generation counts as sent at
 * epoch 0 of this one (sentEpochIn in store.ts).
 *
 * ARGV: sentEpoch, rate, rateBefore, measured|'', cooldownMs, minRate, maxRate|'', ttlMs,
 *   sentGeneration|'', candidateGeneration, fromGeneration|'', fromVersion|'', record (packDecrease),
 *   random, maxPauseMs
 * Returns: { cut (0|1), stale (0|1), rate|'', epoch, generation, books..., repaired }
 */
export const CUT = `${NOW}${CHECK}${GENERATION}${CLAMP}${BOOKS}${SEEDED}
local sentEpoch = tonumber(ARGV[1])
local cooldown = tonumber(ARGV[5])
local minRate = tonumber(ARGV[6])
local maxRate = tonumber(ARGV[7])
local ttl = ARGV[8]
check(tonumber(ARGV[15]))
local gen = generation(ARGV[10], ttl)
if ARGV[9] ~= '' and ARGV[9] ~= gen then sentEpoch = 0 end

local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0
local lastCutAt = tonumber(redis.call('HGET', KEYS[1], 'lastCutAt'))
local cut = 0
local stale = 0
if sentEpoch == epoch and (lastCutAt == nil or now - lastCutAt >= cooldown) then
  -- A state with no rate (made again after it was lost, or a budget not cut yet) has no books a
  -- cut could be stale against: the cut is taken, from the rate its member knew.
  local rateless = redis.call('HEXISTS', KEYS[1], 'rate') == 0
  if rateless or (ARGV[11] == gen and tonumber(ARGV[12]) == num('version', 0)) then
    -- Into a seeded state (SEEDED), from the lowest rate known: a member that cut from a higher
    -- rate than the state's cuts the state's by its factor; the state stays seeded after.
    local seeded = rateless or isSeeded()
    local stored = tonumber(redis.call('HGET', KEYS[1], 'rate'))
    local newRate = tonumber(ARGV[2])
    local before = ARGV[3]
    if not rateless and seeded and stored < tonumber(ARGV[3]) then
      newRate = newRate * stored / tonumber(ARGV[3])
      before = stored
    end
    redis.call('HSET', KEYS[1], 'rate', clamp(newRate, minRate, maxRate), 'rateBefore', before)
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
    redis.call('HSET', KEYS[1], 'epoch', string.format('%d', epoch), 'lastCutAt', now, 'pauseBanked', 0)
    redis.call('HSET', KEYS[1], 'cuts', string.format('%d', num('cuts', 0) + 1))
    changed()
    if rateless then seed(now) elseif seeded then seed(nil) else unseed() end
    redis.call('PEXPIRE', KEYS[1], ttl)
    cut = 1
  else
    stale = 1
  end
end
local rate = redis.call('HGET', KEYS[1], 'rate') or ''
local reply = { cut, stale, rate, epoch, gen }
for _, v in ipairs(books()) do table.insert(reply, v) end
table.insert(reply, repaired)
return reply
`;

/**
 * A Retry-After a member shares (coordinator.ts: all but a second's once the budget has a rate)
 * pauses all: the shared pause ends at the later of its current end and now + ms. Run after
 * `deadline` (server ms, when given: the sender's `redisTimeout` was over, and it was told "no
 * answer"), it does nothing: a pause run late (queued through an outage, a frozen server's socket
 * buffer) paused every member again for the whole `ms`.
 *
 * ARGV: ms, ttlMs, candidateGeneration, maxPauseMs, deadline|''
 * Returns: { the remaining pause in ms, repaired }, or { -1, {}, now } run after the deadline.
 */
export const PAUSE = `${NOW}${CHECK}${GENERATION}${BOOKS}
local ms = tonumber(ARGV[1])
local ttl = ARGV[2]
if ARGV[5] ~= nil and ARGV[5] ~= '' and now > tonumber(ARGV[5]) then return { -1, {}, tostring(now) } end
check(tonumber(ARGV[4]))
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
return { math.max(0, pausedUntil - now), repaired }
`;

/**
 * A member leaving on close: drops it from the members and the demand at once (a key of another
 * type is left for the next heartbeat to repair). ARGV: id
 */
export const LEAVE = `
if redis.call('TYPE', KEYS[3])['ok'] == 'hash' then redis.call('HDEL', KEYS[3], ARGV[1]) end
if redis.call('TYPE', KEYS[2])['ok'] ~= 'zset' then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('ZCARD', KEYS[2])
`;
