-- Keeps, ends or gives back an idempotent request's claim, only while the
-- claim is still this request's (one that lapsed may have been taken since).
-- KEYS[1] the key's record.
-- ARGV[1] the claim this request wrote; ARGV[2] 'extend' (the request
-- still runs), 'keep' (ARGV[3] is the answer's record) or 'drop' (the
-- answer is not kept: the key is given back); ARGV[4] the new TTL, ms.
-- Returns 1 done, 0 the claim was no longer this request's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
if ARGV[2] == 'extend' then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
elseif ARGV[2] == 'keep' then
    redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
else
    redis.call('DEL', KEYS[1])
end
return 1
