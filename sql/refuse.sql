-- Refusals: every rule refuses through os_refuse, with a code of the vocabulary.
--
-- The vocabulary is the os_error_codes table (its rows come with the migrations; the codes
-- crate mirrors it, and a store test checks the two agree). A refusal raises the code's own
-- SQLSTATE with the details as a JSON object in DETAIL; the store maps it back once.
-- POLICY_CHANGED is CONFLICT with reason policy_changed: the gateway proves again.

CREATE OR REPLACE FUNCTION os_refuse(code text, message text, details jsonb DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_code text := code;
    v_details jsonb := coalesce(details, '{}');
    v_state text;
BEGIN
    IF v_code = 'POLICY_CHANGED' THEN
        v_code := 'CONFLICT';
        v_details := v_details || '{"reason": "policy_changed"}';
    END IF;
    SELECT e.sqlstate INTO v_state FROM os_error_codes e WHERE e.code = v_code;
    IF v_state IS NULL THEN
        RAISE EXCEPTION 'os_refuse: % is not a code of os_error_codes', v_code;
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = message, DETAIL = v_details::text;
END $$;
COMMENT ON FUNCTION os_refuse(text, text, jsonb) IS
    'Raises a refusal: the SQLSTATE os_error_codes lists for CODE, DETAIL = the JSON details. The only RAISE of a project code.';
