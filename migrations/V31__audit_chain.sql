-- Receipts are hash-chained, one chain per tree (sql/audit.sql writes and verifies the
-- links): each receipt carries its place in its chain and the hash of its content and of the
-- receipt before it, so a change, deletion, reordering or insertion made around the
-- gateway's functions (a superuser, the disk) shows.

ALTER TABLE audit_log
    ADD COLUMN chain text,
    ADD COLUMN seq bigint,
    ADD COLUMN prev_hash bytea,
    ADD COLUMN row_hash bytea,
    ADD CONSTRAINT audit_log_link_whole CHECK ((chain IS NULL) = (seq IS NULL) AND (seq IS NULL) = (row_hash IS NULL)
                                               AND (seq IS NULL) = (prev_hash IS NULL)),
    ADD CONSTRAINT audit_log_seq_positive CHECK (seq >= 1),
    ADD CONSTRAINT audit_log_hash_length CHECK (length(row_hash) = 32 AND length(prev_hash) IN (0, 32));
COMMENT ON COLUMN audit_log.chain IS
    'The chain the receipt is linked into: its tree (the root id), else owner:ID for a user''s receipts outside any tree, else system.';
COMMENT ON COLUMN audit_log.seq IS 'The receipt''s place in its chain, from 1, without gaps.';
COMMENT ON COLUMN audit_log.prev_hash IS 'row_hash of the receipt before it in its chain (empty for the first).';
COMMENT ON COLUMN audit_log.row_hash IS 'SHA-256 of prev_hash and the receipt''s content (os_audit_row_hash in sql/audit.sql).';

-- Verifying a chain walks it in order.
CREATE UNIQUE INDEX audit_log_chain_seq ON audit_log (chain, seq) WHERE chain IS NOT NULL;
COMMENT ON INDEX audit_log_chain_seq IS 'One receipt per place in a chain.';

-- The last link of every chain, which the next receipt of that chain extends. Updated in
-- place (HOT: fillfactor leaves room, no indexed column changes), so admissions of two trees
-- never touch one index page and SERIALIZABLE sees no conflict between them.
CREATE TABLE audit_chain_heads (
    chain     text NOT NULL,
    seq       bigint NOT NULL,
    prev      bytea NOT NULL,
    head      bytea NOT NULL,
    at        timestamptz NOT NULL,
    CONSTRAINT audit_chain_heads_pkey PRIMARY KEY (chain),
    CONSTRAINT audit_chain_heads_seq_positive CHECK (seq >= 1),
    CONSTRAINT audit_chain_heads_head_length CHECK (length(head) = 32),
    CONSTRAINT audit_chain_heads_prev_length CHECK (length(prev) IN (0, 32))
) WITH (fillfactor = 50);
COMMENT ON TABLE audit_chain_heads IS
    'The last receipt of every audit chain: what the next receipt links to, and what `openshell audit head` exports.';
COMMENT ON COLUMN audit_chain_heads.chain IS 'The chain (audit_log.chain).';
COMMENT ON COLUMN audit_chain_heads.seq IS 'seq of its last receipt.';
COMMENT ON COLUMN audit_chain_heads.prev IS 'prev_hash of its last receipt (the link before the head).';
COMMENT ON COLUMN audit_chain_heads.head IS 'row_hash of its last receipt.';
COMMENT ON COLUMN audit_chain_heads.at IS 'When its last receipt was written.';

-- Receipts written before the chains existed are not linked: the chains cover what follows.
CREATE TABLE audit_chain_origin (
    one        boolean NOT NULL DEFAULT true,
    before_id  bigint NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT audit_chain_origin_pkey PRIMARY KEY (one),
    CONSTRAINT audit_chain_origin_one CHECK (one)
);
COMMENT ON TABLE audit_chain_origin IS
    'One row: receipts with an id up to before_id were written before receipts were chained, and are not verified.';
COMMENT ON COLUMN audit_chain_origin.one IS 'Always true: the table holds one row.';
COMMENT ON COLUMN audit_chain_origin.before_id IS 'The highest receipt id when chaining began (0 on a new database).';
COMMENT ON COLUMN audit_chain_origin.at IS 'When chaining began.';
INSERT INTO audit_chain_origin (before_id) SELECT coalesce(max(id), 0) FROM audit_log;
