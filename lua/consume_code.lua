-- Accepts an SMS code at most once: the step that matches it also deletes
-- it, so two concurrent logins with the same code cannot both succeed.
-- KEYS[1] login:code:<phone>   ARGV[1] the submitted code
-- Returns 1 when the code matched (and is now gone), 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
