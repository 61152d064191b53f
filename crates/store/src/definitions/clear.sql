-- Before the files of sql/ run: every view, trigger and function of the schema goes, except
-- the ones something versioned depends on (a column default, a CHECK, an index), which the
-- files redefine in place (CREATE OR REPLACE). So nothing a file no longer defines survives
-- an apply, and a changed signature or return type needs no DROP of its own. Grants and
-- comments of what stays are cleared too: the files give them again.
DO $$
DECLARE
    r record;
BEGIN
    CREATE TEMP TABLE os_replaceable (classid regclass, objid oid, kind text, name text, pinned boolean)
        ON COMMIT DROP;
    INSERT INTO os_replaceable
    SELECT 'pg_proc'::regclass, p.oid, 'function', p.oid::regprocedure::text, false
      FROM pg_proc p
     WHERE p.pronamespace = 'public'::regnamespace
       AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid
                                                   AND e.deptype = 'e')
    UNION ALL
    SELECT 'pg_class'::regclass, c.oid, 'view', c.oid::regclass::text, false
      FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v'
    UNION ALL
    SELECT 'pg_trigger'::regclass, t.oid, 'trigger', format('%I ON %s', t.tgname, t.tgrelid::regclass), false
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal;

    -- Every dependency, each end named by the object it belongs to: a view's rule and row
    -- type are the view's.
    CREATE TEMP TABLE os_depends ON COMMIT DROP AS
    WITH d AS (
        SELECT d.classid, d.objid, d.refclassid, d.refobjid, d.deptype FROM pg_depend d
         WHERE d.deptype IN ('n', 'a')
    ), owner AS (
        SELECT d.*,
               CASE WHEN d.classid = 'pg_rewrite'::regclass THEN 'pg_class'::regclass
                    WHEN d.classid = 'pg_type'::regclass AND t.typrelid <> 0 THEN 'pg_class'::regclass
                    ELSE d.classid END AS dep_class,
               CASE WHEN d.classid = 'pg_rewrite'::regclass THEN (SELECT ev_class FROM pg_rewrite WHERE oid = d.objid)
                    WHEN d.classid = 'pg_type'::regclass AND t.typrelid <> 0 THEN t.typrelid
                    ELSE d.objid END AS dep_obj,
               CASE WHEN d.refclassid = 'pg_type'::regclass AND rt.typrelid <> 0 THEN 'pg_class'::regclass
                    WHEN d.refclassid = 'pg_type'::regclass AND et.typrelid <> 0 THEN 'pg_class'::regclass
                    ELSE d.refclassid END AS ref_class,
               CASE WHEN d.refclassid = 'pg_type'::regclass AND rt.typrelid <> 0 THEN rt.typrelid
                    WHEN d.refclassid = 'pg_type'::regclass AND et.typrelid <> 0 THEN et.typrelid
                    ELSE d.refobjid END AS ref_obj
          FROM d
          LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
          LEFT JOIN pg_type rt ON d.refclassid = 'pg_type'::regclass AND rt.oid = d.refobjid
          LEFT JOIN pg_type et ON d.refclassid = 'pg_type'::regclass AND et.oid = rt.typelem
    )
    SELECT DISTINCT dep_class, dep_obj, ref_class, ref_obj FROM owner
     WHERE (dep_class, dep_obj) IS DISTINCT FROM (ref_class, ref_obj);

    -- Pinned: what an object outside the replaceable ones depends on, and, in turn, what a
    -- pinned object depends on.
    UPDATE os_replaceable o SET pinned = true
     WHERE EXISTS (SELECT 1 FROM os_depends d
                    WHERE (d.ref_class, d.ref_obj) = (o.classid, o.objid)
                      AND NOT EXISTS (SELECT 1 FROM os_replaceable x WHERE (x.classid, x.objid) = (d.dep_class, d.dep_obj)));
    LOOP
        UPDATE os_replaceable o SET pinned = true
         WHERE NOT o.pinned
           AND EXISTS (SELECT 1 FROM os_depends d JOIN os_replaceable p ON (p.classid, p.objid) = (d.dep_class, d.dep_obj)
                        WHERE p.pinned AND (d.ref_class, d.ref_obj) = (o.classid, o.objid));
        EXIT WHEN NOT FOUND;
    END LOOP;

    -- CASCADE reaches only replaceable objects that are not pinned (nothing else depends on
    -- them): views and functions depend on each other (a function returning a view's rows).
    FOR r IN SELECT name FROM os_replaceable WHERE kind = 'trigger' AND NOT pinned LOOP
        EXECUTE 'DROP TRIGGER ' || r.name;
    END LOOP;
    FOR r IN SELECT name FROM os_replaceable WHERE kind = 'view' AND NOT pinned LOOP
        EXECUTE 'DROP VIEW IF EXISTS ' || r.name || ' CASCADE';
    END LOOP;
    FOR r IN SELECT objid FROM os_replaceable WHERE kind = 'function' AND NOT pinned LOOP
        IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = r.objid) THEN
            EXECUTE 'DROP FUNCTION ' || r.objid::regprocedure || ' CASCADE';
        END IF;
    END LOOP;

    FOR r IN SELECT o.kind, o.name, a.grantee
               FROM os_replaceable o
               JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND p.oid = o.objid
              CROSS JOIN LATERAL aclexplode(p.proacl) a
              WHERE o.pinned AND a.grantee <> p.proowner
             UNION
             SELECT o.kind, o.name, a.grantee
               FROM os_replaceable o
               JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
              CROSS JOIN LATERAL aclexplode(c.relacl) a
              WHERE o.pinned AND a.grantee <> c.relowner LOOP
        EXECUTE format('REVOKE ALL ON %s %s FROM %s', CASE WHEN r.kind = 'view' THEN 'TABLE' ELSE 'FUNCTION' END,
                       r.name, CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.grantee::regrole::text) END);
    END LOOP;
    FOR r IN SELECT kind, name FROM os_replaceable WHERE pinned LOOP
        EXECUTE format('COMMENT ON %s %s IS NULL', upper(r.kind), r.name);
    END LOOP;
END $$;
