-- Children on their parent's template (image digest, CPU, memory, processes): a child gets
-- exactly its parent's template unless its creator asked for less. Asking for another image
-- or more of any resource is refused (NOT_ALLOWED, naming the field), whoever inserts.

CREATE FUNCTION os_fit_template(p_parent jsonb, p_requested jsonb) RETURNS jsonb
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
        RAISE EXCEPTION 'template must be an object' USING ERRCODE = 'OS005';
    END IF;
    FOR field IN SELECT jsonb_object_keys(p_requested) LOOP
        IF field NOT IN ('image', 'cpu_millis', 'memory_bytes', 'pids') THEN
            RAISE EXCEPTION 'template.%: unknown field', field USING ERRCODE = 'OS005';
        END IF;
    END LOOP;
    IF p_requested ? 'image' AND (p_requested->>'image') IS DISTINCT FROM (fitted->>'image') THEN
        RAISE EXCEPTION 'template.image: a child runs its parent''s image (%), not %',
            coalesce(fitted->>'image', 'none'), coalesce(p_requested->>'image', 'none')
            USING ERRCODE = 'OS001',
                  DETAIL = jsonb_build_object('field', 'template.image', 'parent', fitted->'image',
                                              'requested', p_requested->'image')::text;
    END IF;
    FOREACH field IN ARRAY ARRAY['cpu_millis', 'memory_bytes', 'pids'] LOOP
        CONTINUE WHEN NOT p_requested ? field OR jsonb_typeof(p_requested->field) = 'null';
        IF jsonb_typeof(p_requested->field) <> 'number' OR (p_requested->>field)::numeric <= 0 THEN
            RAISE EXCEPTION 'template.%: must be a positive number', field USING ERRCODE = 'OS005';
        END IF;
        want := (p_requested->>field)::numeric;
        have := (fitted->>field)::numeric;   -- NULL: the parent has no limit on it
        IF have IS NOT NULL AND want > have THEN
            RAISE EXCEPTION 'template.%: % is more than the parent''s %', field, want, have
                USING ERRCODE = 'OS001',
                      DETAIL = jsonb_build_object('field', 'template.' || field, 'parent', have,
                                                  'requested', want)::text;
        END IF;
        fitted := jsonb_set(fitted, ARRAY[field], p_requested->field);
    END LOOP;
    RETURN fitted;
END $$;
COMMENT ON FUNCTION os_fit_template(jsonb, jsonb) IS
    'A child''s template: its parent''s, narrowed by what was requested; refuses (OS001, naming the field) another image or more CPU, memory or processes than the parent has.';

-- The insert trigger of V5, with the template rule: a child's template is its parent's,
-- narrowed by a request (the row's own template, or admit_child_templated's).
CREATE OR REPLACE FUNCTION sandboxes_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    p sandboxes;
    requested jsonb;
BEGIN
    IF NEW.parent_id IS NULL THEN
        NEW.root_id := NEW.id;
        NEW.depth := 0;
    ELSE
        SELECT * INTO p FROM sandboxes WHERE id = NEW.parent_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'parent % does not exist', NEW.parent_id;
        END IF;
        IF p.kind = 'tool' THEN
            RAISE EXCEPTION 'a tool sandbox cannot have children';
        END IF;
        -- Lineage comes from the parent row, never from the caller.
        NEW.root_id := p.root_id;
        NEW.depth := p.depth + 1;
        NEW.owner_id := p.owner_id;
        requested := coalesce(nullif(NEW.template, '{}'::jsonb),
                              nullif(current_setting('openshell.child_template', true), '')::jsonb);
        NEW.template := os_fit_template(p.template, requested);
    END IF;
    NEW.phase := 'PROVISIONING';
    NEW.live_children := 0;
    RETURN NEW;
END $$;

-- admit_child with a requested template: the request travels to the insert trigger in a
-- transaction-local setting (it can only narrow: the trigger fits it to the parent's).
CREATE FUNCTION admit_child_templated(p_user bigint, p_sandbox uuid, p_program text, p_parent text, p_name text,
                                      p_kind text, p_command text[], p_policy jsonb, p_policy_hash bytea,
                                      p_proof jsonb, p_credential_hash bytea, p_request_id text,
                                      p_args_hash bytea, p_runner text, p_template jsonb)
RETURNS TABLE (sandbox_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('openshell.child_template', coalesce(p_template, '{}'::jsonb)::text, true);
    RETURN QUERY SELECT a.sandbox_id, a.replayed
                   FROM admit_child(p_user, p_sandbox, p_program, p_parent, p_name, p_kind, p_command, p_policy,
                                    p_policy_hash, p_proof, p_credential_hash, p_request_id, p_args_hash,
                                    p_runner) a;
    PERFORM set_config('openshell.child_template', '', true);
END $$;
COMMENT ON FUNCTION admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb) IS
    'admit_child, with the template the creator asked for (fitted to the parent''s by the insert trigger; another image or more resources are refused).';

ALTER FUNCTION os_fit_template(jsonb, jsonb) OWNER TO openshell_owner;
ALTER FUNCTION sandboxes_before_insert() OWNER TO openshell_owner;
ALTER FUNCTION admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb)
    OWNER TO openshell_owner;
REVOKE EXECUTE ON FUNCTION os_fit_template(jsonb, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb) FROM PUBLIC;
ALTER FUNCTION admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb)
    SECURITY DEFINER SET search_path = public, pg_temp;
GRANT EXECUTE ON FUNCTION admit_child_templated(bigint, uuid, text, text, text, text, text[], jsonb, bytea, jsonb, bytea, text, bytea, text, jsonb)
    TO openshell_gateway;
