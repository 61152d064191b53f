-- take_call(uuid) took a tool call without a door credential. Since V21 every tool call of a
-- sandbox comes through its door and take_door_call (one rule, one path), so nothing calls
-- it: dropped, so the bucket has one entrance.
DROP FUNCTION take_call(uuid);
