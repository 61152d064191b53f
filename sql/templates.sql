-- A child's template: its parent's, or narrower.
--
-- A child runs on its parent's template (image digest, CPU, memory, processes, disk) unless
-- its creator asked for less. Another image or more of any resource is refused (NOT_ALLOWED,
-- naming the field), whoever inserts: sandboxes_before_insert (sql/lineage.sql) applies it.

CREATE OR REPLACE FUNCTION os_fit_template(p_parent jsonb, p_requested jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    fitted jsonb := coalesce(p_parent, '{}');
    field text;
    want numeric;
    have numeric;
BEGIN
    IF p_requested IS NULL OR p_requested = '{}'::jsonb THEN
        RETURN fitted;
    END IF;
    IF jsonb_typeof(p_requested) <> 'object' THEN
        PERFORM os_refuse('INVALID_ARGUMENT', 'template must be an object', '{"field": "template"}');
    END IF;
    FOR field IN SELECT jsonb_object_keys(p_requested) LOOP
        IF field NOT IN ('image', 'cpu_millis', 'memory_bytes', 'pids', 'disk_bytes') THEN
            PERFORM os_refuse('INVALID_ARGUMENT', format('template.%s: unknown field', field),
                              jsonb_build_object('field', 'template.' || field));
        END IF;
    END LOOP;
    IF p_requested ? 'image' AND (p_requested->>'image') IS DISTINCT FROM (fitted->>'image') THEN
        PERFORM os_refuse('NOT_ALLOWED',
            format('template.image: a child runs its parent''s image (%s), not %s',
                   coalesce(fitted->>'image', 'none'), coalesce(p_requested->>'image', 'none')),
            jsonb_build_object('field', 'template.image', 'parent', fitted->'image', 'requested', p_requested->'image'));
    END IF;
    FOREACH field IN ARRAY ARRAY['cpu_millis', 'memory_bytes', 'pids', 'disk_bytes'] LOOP
        CONTINUE WHEN NOT p_requested ? field OR jsonb_typeof(p_requested->field) = 'null';
        IF jsonb_typeof(p_requested->field) <> 'number' OR (p_requested->>field)::numeric <= 0 THEN
            PERFORM os_refuse('INVALID_ARGUMENT', format('template.%s: must be a positive number', field),
                              jsonb_build_object('field', 'template.' || field));
        END IF;
        want := (p_requested->>field)::numeric;
        have := (fitted->>field)::numeric;   -- NULL: the parent has no limit on it
        IF have IS NOT NULL AND want > have THEN
            PERFORM os_refuse('NOT_ALLOWED',
                format('template.%s: %s is more than the parent''s %s', field, want, have),
                jsonb_build_object('field', 'template.' || field, 'parent', have, 'requested', want));
        END IF;
        fitted := jsonb_set(fitted, ARRAY[field], p_requested->field);
    END LOOP;
    RETURN fitted;
END $$;
COMMENT ON FUNCTION os_fit_template(jsonb, jsonb) IS
    'A child''s template: its parent''s, narrowed by what was requested; refuses (OS001, naming the field) another image or more CPU, memory, processes or disk than the parent has.';
