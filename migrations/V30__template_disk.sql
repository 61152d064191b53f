-- A sandbox's template may say how large its own filesystem is (its working directory and
-- /tmp): `disk_bytes`, inherited by children like CPU and memory (sql/templates.sql). Stored
-- templates from before it have none: they ran on the host's disk, and their children may
-- ask for any size up to the gateway's maximum.

ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_template_disk_bytes CHECK (
    NOT template ? 'disk_bytes'
    OR (jsonb_typeof(template->'disk_bytes') = 'number'
        AND (template->>'disk_bytes')::numeric >= 1
        AND (template->>'disk_bytes')::numeric = trunc((template->>'disk_bytes')::numeric)));
COMMENT ON CONSTRAINT sandboxes_template_disk_bytes ON sandboxes IS
    'A template''s disk_bytes, when present, is a positive whole number of bytes.';
