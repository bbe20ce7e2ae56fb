-- A guarded voucher's waiting room: buyers are admitted at the voucher's
-- rate, first come first served by arrival here, across instances.
-- KEYS[1] line (zset user -> arrival number), KEYS[2] seen (zset user ->
-- last ask, ms), KEYS[3] admitted (zset user -> admitted until, ms),
-- KEYS[4] state (hash: tokens, at, arrivals, sec, asks, prev), all under
-- the voucher's hash tag; KEYS[5], when a solved challenge comes with the
-- ask, that challenge's use (same tag).
-- ARGV[1] user, ARGV[2] admissions per second, ARGV[3] burst (admissions
-- saved up at most), ARGV[4] line size at most, ARGV[5] ms after which a
-- buyer who stopped asking has left, ARGV[6] ms an admission lasts,
-- ARGV[7] 1 to join the line (0: only look), ARGV[8] ms the challenge's
-- use is kept, ARGV[9] ms the keys are kept (past the sale's end).
-- Returns {verdict, position, asks}: verdict 0 admitted, 1 in line (at
-- position), 2 not in line (looking only; position: the line's length),
-- 3 the line is full, 4 the challenge was used before; asks: path
-- requests in the last whole second (or this one, if more).
-- A key made by this call gets its lifetime at once; the others have it
-- renewed once a second (below).
local function kept_if_new(key)
    if redis.call('ZCARD', key) == 1 then redis.call('PEXPIRE', key, ARGV[9]) end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[4], 'tokens', 'at', 'sec', 'asks', 'prev')

-- The load: asks this second and the last.
local sec = math.floor(now / 1000)
local asks, prev = tonumber(state[4]) or 0, tonumber(state[5]) or 0
if tonumber(state[3]) ~= sec then
    prev = (tonumber(state[3]) == sec - 1) and asks or 0
    asks = 0
end
asks = asks + 1

-- Buyers who stopped asking leave; admissions past their time end. A
-- bounded batch per call: each ask clears its share.
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[5]), 'LIMIT', 0, 100)
if #gone > 0 then
    redis.call('ZREM', KEYS[1], unpack(gone))
    redis.call('ZREM', KEYS[2], unpack(gone))
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)

-- Admissions saved up since the last ask, at most a burst.
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)

-- The head of the line goes first, as far as the admissions reach.
local until_ms = now + tonumber(ARGV[6])
while tokens >= 1 do
    local head = redis.call('ZRANGE', KEYS[1], 0, 0)
    if #head == 0 then break end
    redis.call('ZREM', KEYS[1], head[1])
    redis.call('ZREM', KEYS[2], head[1])
    redis.call('ZADD', KEYS[3], until_ms, head[1])
    kept_if_new(KEYS[3])
    tokens = tokens - 1
end

local user = ARGV[1]
local verdict, position = nil, 0
-- A solution is used once, whatever the buyer's place.
if KEYS[5] and not redis.call('SET', KEYS[5], user, 'NX', 'PX', ARGV[8]) then
    verdict = 4
elseif redis.call('ZSCORE', KEYS[3], user) then
    verdict = 0
elseif redis.call('ZSCORE', KEYS[1], user) then
    redis.call('ZADD', KEYS[2], now, user)
    verdict, position = 1, redis.call('ZRANK', KEYS[1], user) + 1
elseif ARGV[7] ~= '1' then
    verdict, position = 2, redis.call('ZCARD', KEYS[1])
elseif redis.call('ZCARD', KEYS[1]) == 0 and tokens >= 1 then
    -- Nobody waits and the rate allows it: in at once.
    tokens = tokens - 1
    redis.call('ZADD', KEYS[3], until_ms, user)
    kept_if_new(KEYS[3])
    verdict = 0
elseif redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
    verdict = 3
else
    local arrival = redis.call('HINCRBY', KEYS[4], 'arrivals', 1)
    redis.call('ZADD', KEYS[1], arrival, user)
    redis.call('ZADD', KEYS[2], now, user)
    kept_if_new(KEYS[1])
    kept_if_new(KEYS[2])
    verdict, position = 1, redis.call('ZCARD', KEYS[1])
end

redis.call('HSET', KEYS[4], 'tokens', tostring(tokens), 'at', now, 'sec', sec, 'asks', asks, 'prev', prev)
-- The keys' lifetime is renewed once a second, not on every ask.
if tonumber(state[3]) ~= sec then
    for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[9]) end
end
return {verdict, position, math.max(asks, prev)}
