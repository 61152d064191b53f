-- After the files of sql/ ran: every function, view and trigger of the schema must have been
-- (re)defined by this transaction (its catalog row written by it). One left from before is
-- one no file defines any more that something versioned still depends on: the apply fails
-- naming it.
SELECT 'function ' || p.oid::regprocedure AS object
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.xmin <> pg_current_xact_id()::xid
   AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e')
UNION ALL
SELECT 'view ' || c.oid::regclass
  FROM pg_class c JOIN pg_rewrite r ON r.ev_class = c.oid
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v' AND r.xmin <> pg_current_xact_id()::xid
UNION ALL
SELECT format('trigger %I on %s', t.tgname, t.tgrelid::regclass)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal AND t.xmin <> pg_current_xact_id()::xid
 ORDER BY 1
