-- The definitions in sql/ (functions, trigger functions, triggers, views, their grants and
-- comments) are applied after the migrations, when the database holds an older revision of
-- them (crates/store/src/definitions.rs). From here on a migration carries none of those:
-- it holds what must be versioned (tables, columns, constraints, indexes, types, data).

CREATE TABLE sql_revisions (
    revision    integer NOT NULL,
    checksum    bytea NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    applied_by  text NOT NULL DEFAULT session_user,
    CONSTRAINT sql_revisions_pkey PRIMARY KEY (revision),
    CONSTRAINT sql_revisions_revision_positive CHECK (revision >= 1),
    CONSTRAINT sql_revisions_checksum_length CHECK (length(checksum) = 32)
);
COMMENT ON TABLE sql_revisions IS
    'Every revision of the definitions in sql/ applied to this database; the highest is what it holds. A gateway whose build has an older revision refuses to start.';
COMMENT ON COLUMN sql_revisions.revision IS 'The revision (sql/revision), which only grows.';
COMMENT ON COLUMN sql_revisions.checksum IS 'SHA-256 over the files of that revision: two builds with one revision must agree on it.';
COMMENT ON COLUMN sql_revisions.applied_at IS 'When it was applied.';
COMMENT ON COLUMN sql_revisions.applied_by IS 'The database login that applied it.';
GRANT SELECT ON sql_revisions TO openshell_operator;

-- A sandbox name's form is sql/names.sql's, checked by sandboxes_before_insert for every
-- inserter (a name never changes after): the CHECK that restated it goes.
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_name_format;
