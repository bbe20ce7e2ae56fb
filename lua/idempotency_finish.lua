-- Ends an idempotent request's claim, only if the claim is still this
-- request's (a claim that outlived its bound may have been taken since).
-- KEYS[1] the key's record.
-- ARGV[1] the running record this request wrote, ARGV[2] the answer's
-- record ('' to give the key back: the answer is not kept), ARGV[3] how
-- long the answer is kept, ms.
-- Returns 1 done, 0 the claim was no longer this request's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
if ARGV[2] == '' then
    redis.call('DEL', KEYS[1])
else
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
