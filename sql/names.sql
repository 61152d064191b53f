-- A sandbox name's form, stated once.
--
-- os_sandbox_name_ok is the rule. admit_child and create_root check it first, for their error
-- message; sandboxes_before_insert checks it for every other inserter (psql included). A name
-- is fixed at creation (sandboxes_before_update), so an insert is the only time to check.
-- Uniqueness among the owner's sandboxes that are not DELETED is the unique index's.
--
-- The form has no counted repetition: PostgreSQL's regex engine expands `{0,62}` into as many
-- states (8 us a match); a length bound and `*` cost about 0.3 us. The id test runs only on
-- names of an id's length.

CREATE OR REPLACE FUNCTION os_sandbox_name_ok(p_name text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT length(p_name) <= 63 AND p_name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'
       AND (length(p_name) <> 36 OR p_name !~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')
$$;
COMMENT ON FUNCTION os_sandbox_name_ok(text) IS
    'The form of a sandbox name: 1 to 63 of A-Z, a-z, 0-9, ., _ or -, starting with a letter or digit, and not shaped like an id. The one statement of the rule.';

-- Refuses a name of another form, naming the field (the message people see).
CREATE OR REPLACE FUNCTION os_check_name_format(p_name text) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR NOT os_sandbox_name_ok(p_name) THEN
        PERFORM os_refuse('INVALID_ARGUMENT',
            'name: 1 to 63 of A-Z, a-z, 0-9, ., _ or -, starting with a letter or digit, and not an id',
            jsonb_build_object('field', 'name'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_name_format(text) IS
    'Names the problem with a new sandbox name''s form (uniqueness is the index''s).';

CREATE OR REPLACE FUNCTION os_check_new_name(p_owner bigint, p_name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM os_check_name_format(p_name);
    IF EXISTS (SELECT 1 FROM sandboxes WHERE owner_id = p_owner AND name = p_name AND phase <> 'DELETED') THEN
        PERFORM os_refuse('CONFLICT', format('a sandbox named %s already exists', p_name),
                          jsonb_build_object('field', 'name'));
    END IF;
END $$;
COMMENT ON FUNCTION os_check_new_name(bigint, text) IS
    'Names the problem with a new sandbox name.';
