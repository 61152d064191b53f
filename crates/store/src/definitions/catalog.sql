-- Everything the definitions in sql/ make, one row per object: what it is and everything
-- about it the files set (its definition, owner, grants, comments, whether it is enabled).
-- Two databases hold the same definitions when these rows are equal.
SELECT 'function ' || p.oid::regprocedure AS object,
       concat_ws(E'\n', pg_get_functiondef(p.oid), 'owner ' || pg_get_userbyid(p.proowner), 'acl ' || p.proacl::text,
                 'comment ' || obj_description(p.oid, 'pg_proc')) AS definition
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e')
UNION ALL
SELECT format('trigger %I on %s', t.tgname, t.tgrelid::regclass),
       concat_ws(E'\n', pg_get_triggerdef(t.oid), 'enabled ' || t.tgenabled::text, 'comment ' || obj_description(t.oid, 'pg_trigger'))
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'view ' || c.oid::regclass,
       concat_ws(E'\n', pg_get_viewdef(c.oid), 'owner ' || pg_get_userbyid(c.relowner), 'acl ' || c.relacl::text,
                 'comment ' || obj_description(c.oid, 'pg_class'),
                 (SELECT string_agg(a.attname || ': ' || col_description(c.oid, a.attnum), E'\n' ORDER BY a.attnum)
                    FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND col_description(c.oid, a.attnum) IS NOT NULL))
  FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v'
 ORDER BY 1
