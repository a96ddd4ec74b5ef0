-- test/t/extension_catalog.sql: the catalog of the streaming extension in
-- this database, one line per fact, without OIDs, sorted; 008_upgrade.pl
-- compares it between an upgraded and a freshly created extension.  By hand:
--     psql -XAtq -d DB -f test/t/extension_catalog.sql
--
-- Each line is "SCOPE|WHAT ...":
--   extension  the extension's own objects: the extension (version,
--              configuration tables and their conditions), its schema, every
--              member object (pg_depend 'e', by identity), and for each
--              member relation (tables, views, sequences, composite types)
--              its properties, ACL, row-level security, options, columns
--              (position among the live ones, name, type and typmod, not
--              null, default, identity, generated, collation, storage,
--              compression, statistics target, options, ACL), constraints,
--              indexes, triggers, rules, view definition, policies,
--              sequence parameters and owner column, extended statistics and
--              inheritance; for each member function its whole definition
--              (pg_get_functiondef: signature with names and defaults,
--              result, language, volatility, strictness, security definer,
--              leakproof, parallel, cost, rows, SET options, body), owner
--              and ACL; aggregates, types, event triggers; comments,
--              security labels and initial privileges (pg_init_privs) of all
--              of these; and relations and functions in the extension's
--              schema that are not part of it (left behind).
--   streams    the tables that streams made: state and dedup tables (they
--              depend on the extension), sinks and source views, described
--              the same way.
-- Dropped columns are not seen (an upgrade that drops a column equals a
-- fresh install without it); column order is (an upgrade adds columns at
-- the end of a table, so a fresh install must list them last too).  The
-- pg_attver entry of a column's options is left out: this server records
-- there the WAL position at which the column was made, which differs
-- between any two databases.
SET search_path = pg_catalog, pg_temp;

-- a privilege list in a stable order
CREATE FUNCTION pg_temp.acl(a aclitem[]) RETURNS text
LANGUAGE sql IMMUTABLE AS
$$SELECT coalesce((SELECT string_agg(i::text, ',' ORDER BY i::text) FROM unnest(a) i), '-')$$;

-- options (reloptions, attoptions, proconfig) in a stable order
CREATE FUNCTION pg_temp.opts(o text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS
$$SELECT coalesce((SELECT string_agg(i, ',' ORDER BY i) FROM unnest(o) i), '-')$$;

CREATE FUNCTION pg_temp.rel(r oid) RETURNS text
LANGUAGE sql STABLE AS
$$SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = r$$;

CREATE FUNCTION pg_temp.role(r oid) RETURNS text
LANGUAGE sql STABLE AS
$$SELECT CASE WHEN r = 0 THEN 'public' ELSE (SELECT quote_ident(rolname) FROM pg_roles WHERE oid = r) END$$;

WITH
ext AS (
    SELECT e.* FROM pg_extension e WHERE e.extname = 'streaming'
),
member AS (
    SELECT d.classid, d.objid
    FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
      AND d.deptype = 'e'
),
-- the relations to describe: the extension's own (with the relations of its
-- composite types), and those of its streams
rel AS (
    SELECT m.objid AS oid, 'extension' AS scope
    FROM member m WHERE m.classid = 'pg_class'::regclass
    UNION
    SELECT t.typrelid, 'extension'
    FROM member m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
    WHERE t.typrelid <> 0
    UNION
    SELECT d.objid, 'streams'
    FROM pg_depend d, ext
    WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
      AND d.refobjid = ext.oid AND d.deptype = 'n'
    UNION
    SELECT s.sink::oid, 'streams' FROM streaming.stream_defs s WHERE s.sink IS NOT NULL
    UNION
    SELECT s.view::oid, 'streams' FROM streaming.sources s
),
-- every object whose comment, security label or initial privileges count
obj AS (
    SELECT m.classid, m.objid, 'extension' AS scope FROM member m
    UNION SELECT 'pg_class'::regclass, r.oid, r.scope FROM rel r
    UNION SELECT 'pg_class'::regclass, i.indexrelid, r.scope FROM pg_index i JOIN rel r ON r.oid = i.indrelid
    UNION SELECT 'pg_constraint'::regclass, c.oid, r.scope FROM pg_constraint c JOIN rel r ON r.oid = c.conrelid
    UNION SELECT 'pg_trigger'::regclass, t.oid, r.scope FROM pg_trigger t JOIN rel r ON r.oid = t.tgrelid
    UNION SELECT 'pg_policy'::regclass, p.oid, r.scope FROM pg_policy p JOIN rel r ON r.oid = p.polrelid
    UNION SELECT 'pg_rewrite'::regclass, w.oid, r.scope FROM pg_rewrite w JOIN rel r ON r.oid = w.ev_class
    UNION SELECT 'pg_namespace'::regclass, ext.extnamespace, 'extension' FROM ext
),
line AS (
    -- the extension
    SELECT 'extension' AS scope,
           format('extension %I version=%s schema=%I relocatable=%s owner=%s',
                  ext.extname, ext.extversion, n.nspname, ext.extrelocatable,
                  pg_temp.role(ext.extowner)) AS line
    FROM ext JOIN pg_namespace n ON n.oid = ext.extnamespace
    UNION ALL
    SELECT 'extension',
           format('configuration table %s condition=%L', pg_temp.rel(c.oid), c.cond)
    FROM ext, unnest(ext.extconfig, ext.extcondition) AS c(oid, cond)
    UNION ALL
    SELECT 'extension',
           format('schema %I owner=%s acl=%s', n.nspname, pg_temp.role(n.nspowner),
                  pg_temp.acl(n.nspacl))
    FROM ext JOIN pg_namespace n ON n.oid = ext.extnamespace
    UNION ALL
    SELECT 'extension',
           format('default privileges of %s in schema %I on %s: %s', pg_temp.role(da.defaclrole),
                  n.nspname, da.defaclobjtype, pg_temp.acl(da.defaclacl))
    FROM ext JOIN pg_default_acl da ON da.defaclnamespace = ext.extnamespace
    JOIN pg_namespace n ON n.oid = da.defaclnamespace
    UNION ALL
    -- every member, by its identity
    SELECT 'extension', format('member %s %s', i.type, i.identity)
    FROM member m, pg_identify_object(m.classid, m.objid, 0) i
    UNION ALL
    -- relations
    SELECT r.scope,
           format('relation %s kind=%s persistence=%s owner=%s acl=%s rls=%s force_rls=%s '
                  'replica_identity=%s options=%s access_method=%s tablespace=%s '
                  'partition_key=%s partition_bound=%s',
                  pg_temp.rel(c.oid), c.relkind, c.relpersistence, pg_temp.role(c.relowner),
                  pg_temp.acl(c.relacl), c.relrowsecurity, c.relforcerowsecurity,
                  c.relreplident, pg_temp.opts(c.reloptions),
                  coalesce((SELECT amname FROM pg_am WHERE oid = c.relam), '-'),
                  coalesce((SELECT spcname FROM pg_tablespace WHERE oid = c.reltablespace), '-'),
                  CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) ELSE '-' END,
                  coalesce(pg_get_expr(c.relpartbound, c.oid), '-'))
    FROM rel r JOIN pg_class c ON c.oid = r.oid
    UNION ALL
    -- columns, numbered among the live ones
    SELECT r.scope,
           format('column %s.%I position=%s type=%s not_null=%s default=%s identity=%s '
                  'generated=%s collation=%s storage=%s compression=%s statistics=%s '
                  'options=%s acl=%s',
                  pg_temp.rel(a.attrelid), a.attname,
                  row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
                  format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-'),
                  nullif(a.attidentity, ''), nullif(a.attgenerated, ''),
                  coalesce((SELECT format('%I.%I', cn.nspname, co.collname)
                            FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
                            WHERE co.oid = a.attcollation), '-'),
                  a.attstorage, nullif(a.attcompression, ''), a.attstattarget,
                  pg_temp.opts(ARRAY(SELECT o FROM unnest(a.attoptions) o
                                     WHERE o NOT LIKE 'pg\_attver=%')),
                  pg_temp.acl(a.attacl))
    FROM rel r
    JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
    UNION ALL
    -- constraints of relations and of member domains
    SELECT r.scope,
           format('constraint %s %I %s deferrable=%s deferred=%s validated=%s no_inherit=%s',
                  pg_temp.rel(co.conrelid), co.conname, pg_get_constraintdef(co.oid),
                  co.condeferrable, co.condeferred, co.convalidated, co.connoinherit)
    FROM rel r JOIN pg_constraint co ON co.conrelid = r.oid
    UNION ALL
    SELECT 'extension',
           format('constraint %s %I %s validated=%s', format_type(co.contypid, NULL), co.conname,
                  pg_get_constraintdef(co.oid), co.convalidated)
    FROM member m JOIN pg_constraint co ON m.classid = 'pg_type'::regclass AND co.contypid = m.objid
    UNION ALL
    -- indexes
    SELECT r.scope,
           format('index %s primary=%s unique=%s nulls_not_distinct=%s exclusion=%s immediate=%s '
                  'clustered=%s replica_identity=%s valid=%s tablespace=%s',
                  pg_get_indexdef(i.indexrelid), i.indisprimary, i.indisunique,
                  i.indnullsnotdistinct, i.indisexclusion, i.indimmediate, i.indisclustered,
                  i.indisreplident, i.indisvalid,
                  coalesce((SELECT spcname FROM pg_tablespace t JOIN pg_class ic ON ic.reltablespace = t.oid
                            WHERE ic.oid = i.indexrelid), '-'))
    FROM rel r JOIN pg_index i ON i.indrelid = r.oid
    UNION ALL
    -- triggers (not the internal ones of foreign keys: their constraints are above)
    SELECT r.scope, format('trigger %s enabled=%s', pg_get_triggerdef(t.oid), t.tgenabled)
    FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
    UNION ALL
    -- rules other than views' own
    SELECT r.scope, format('rule %s enabled=%s', pg_get_ruledef(w.oid), w.ev_enabled)
    FROM rel r JOIN pg_rewrite w ON w.ev_class = r.oid AND w.rulename <> '_RETURN'
    UNION ALL
    -- view definitions
    SELECT r.scope, format('view %s as %s', pg_temp.rel(c.oid), pg_get_viewdef(c.oid))
    FROM rel r JOIN pg_class c ON c.oid = r.oid AND c.relkind IN ('v', 'm')
    UNION ALL
    -- row-level security policies
    SELECT r.scope,
           format('policy %s %I command=%s permissive=%s roles=%s using=%s check=%s',
                  pg_temp.rel(p.polrelid), p.polname, p.polcmd, p.polpermissive,
                  (SELECT string_agg(pg_temp.role(x), ',' ORDER BY pg_temp.role(x)) FROM unnest(p.polroles) x),
                  coalesce(pg_get_expr(p.polqual, p.polrelid), '-'),
                  coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '-'))
    FROM rel r JOIN pg_policy p ON p.polrelid = r.oid
    UNION ALL
    -- sequences: parameters and the column that owns them, not their values
    SELECT r.scope,
           format('sequence %s type=%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
                  pg_temp.rel(s.seqrelid), format_type(s.seqtypid, NULL), s.seqstart,
                  s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
                  coalesce((SELECT string_agg(format('%s.%I', pg_temp.rel(d.refobjid), a.attname), ',')
                            FROM pg_depend d
                            JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                            WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
                              AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0
                              AND d.deptype IN ('a', 'i')), '-'))
    FROM rel r JOIN pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT r.scope, format('statistics %s', pg_get_statisticsobjdef(x.oid))
    FROM rel r JOIN pg_statistic_ext x ON x.stxrelid = r.oid
    UNION ALL
    SELECT r.scope, format('inherits %s from %s (%s)', pg_temp.rel(h.inhrelid),
                           pg_temp.rel(h.inhparent), h.inhseqno)
    FROM rel r JOIN pg_inherits h ON h.inhrelid = r.oid
    UNION ALL
    -- functions and procedures: their whole definition
    SELECT 'extension',
           format('function %s owner=%s acl=%s definition=%s',
                  p.oid::regprocedure, pg_temp.role(p.proowner), pg_temp.acl(p.proacl),
                  CASE WHEN p.prokind = 'a' THEN '-' ELSE pg_get_functiondef(p.oid) END)
    FROM member m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    SELECT 'extension',
           format('aggregate %s kind=%s transfn=%s finalfn=%s combinefn=%s serialfn=%s '
                  'deserialfn=%s mtransfn=%s minvtransfn=%s mfinalfn=%s finalextra=%s '
                  'mfinalextra=%s finalmodify=%s mfinalmodify=%s sortop=%s transtype=%s '
                  'transspace=%s mtranstype=%s mtransspace=%s initval=%s minitval=%s',
                  a.aggfnoid::regprocedure, a.aggkind, a.aggtransfn::regprocedure,
                  a.aggfinalfn::regprocedure, a.aggcombinefn::regprocedure,
                  a.aggserialfn::regprocedure, a.aggdeserialfn::regprocedure,
                  a.aggmtransfn::regprocedure, a.aggminvtransfn::regprocedure,
                  a.aggmfinalfn::regprocedure, a.aggfinalextra, a.aggmfinalextra,
                  a.aggfinalmodify, a.aggmfinalmodify, a.aggsortop::regoperator,
                  format_type(a.aggtranstype, NULL), a.aggtransspace,
                  format_type(nullif(a.aggmtranstype, 0), NULL), a.aggmtransspace,
                  a.agginitval, a.aggminitval)
    FROM member m JOIN pg_aggregate a ON m.classid = 'pg_proc'::regclass AND a.aggfnoid = m.objid
    UNION ALL
    -- types: kind, base type, default, enum labels, range subtype
    SELECT 'extension',
           format('type %s kind=%s owner=%s acl=%s base=%s not_null=%s default=%s collation=%s '
                  'input=%s output=%s labels=%s range_subtype=%s',
                  format_type(t.oid, NULL), t.typtype, pg_temp.role(t.typowner), pg_temp.acl(t.typacl),
                  format_type(nullif(t.typbasetype, 0), t.typtypmod), t.typnotnull,
                  coalesce(t.typdefault, '-'), t.typcollation <> 0,
                  t.typinput::regprocedure, t.typoutput::regprocedure,
                  coalesce((SELECT string_agg(quote_literal(e.enumlabel), ',' ORDER BY e.enumsortorder)
                            FROM pg_enum e WHERE e.enumtypid = t.oid), '-'),
                  coalesce((SELECT format_type(rg.rngsubtype, NULL) FROM pg_range rg
                            WHERE rg.rngtypid = t.oid), '-'))
    FROM member m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
    UNION ALL
    SELECT 'extension',
           format('event trigger %I event=%s function=%s enabled=%s tags=%s', e.evtname, e.evtevent,
                  e.evtfoid::regprocedure, e.evtenabled, pg_temp.opts(e.evttags))
    FROM member m JOIN pg_event_trigger e ON m.classid = 'pg_event_trigger'::regclass AND e.oid = m.objid
    UNION ALL
    -- comments, security labels and initial privileges
    SELECT o.scope, format('comment on %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid),
                           d.description)
    FROM obj o JOIN pg_description d ON d.classoid = o.classid AND d.objoid = o.objid
    UNION ALL
    SELECT o.scope, format('security label on %s (%s): %s',
                           pg_describe_object(l.classoid, l.objoid, l.objsubid), l.provider, l.label)
    FROM obj o JOIN pg_seclabel l ON l.classoid = o.classid AND l.objoid = o.objid
    UNION ALL
    SELECT o.scope, format('initial privileges of %s (%s): %s',
                           pg_describe_object(ip.classoid, ip.objoid, ip.objsubid), ip.privtype,
                           pg_temp.acl(ip.initprivs))
    FROM obj o JOIN pg_init_privs ip ON ip.classoid = o.classid AND ip.objoid = o.objid
    UNION ALL
    -- left behind in the extension's schema: not the extension's, not a stream's
    SELECT 'extension', format('left behind: %s', pg_describe_object('pg_class'::regclass, c.oid, 0))
    FROM ext JOIN pg_class c ON c.relnamespace = ext.extnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
      AND c.oid NOT IN (SELECT oid FROM rel)
      AND NOT EXISTS (SELECT 1 FROM pg_depend d
                      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                        AND d.refobjid IN (SELECT oid FROM rel) AND d.deptype IN ('a', 'i'))
    UNION ALL
    SELECT 'extension', format('left behind: %s', p.oid::regprocedure)
    FROM ext JOIN pg_proc p ON p.pronamespace = ext.extnamespace
    WHERE NOT EXISTS (SELECT 1 FROM member m WHERE m.classid = 'pg_proc'::regclass AND m.objid = p.oid)
)
SELECT scope || '|' || replace(line, E'\n', '\n')
FROM line
ORDER BY scope COLLATE "C", line COLLATE "C";
