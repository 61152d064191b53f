-- The table's comment pointed at a design document outside the repository; the table's rows
-- are the list itself.
COMMENT ON TABLE os_error_codes IS
    'The error codes of every surface, each with its meaning and the SQLSTATE a refusal raised in SQL carries. '
    'The gateway maps a SQLSTATE to its code once (crates/store/src/error.rs); a test checks both lists agree.';
