-- client_exists.lua: whether a dlock Client's holder record exists, read on
-- the master (a script is never routed to a replica, which may lag).
--
-- KEYS[1]  the record (dlock:client:<id>)
--
-- Returns 1 when it exists, 0 when not.
return redis.call('exists', KEYS[1])
