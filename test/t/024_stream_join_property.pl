# 024_stream_join_property.pl: a property test of joins of two sources
# (SPEC 3.6).
#
# Each round makes two topics and sources (a left and a right side: id,
# key k, value v, event time t) and five streams over them, an inner, a
# left outer, a full outer, a left semi (EXISTS) and a left anti (NOT
# EXISTS) join, all on
#
#     l.k = r.k AND r.t BETWEEN l.t - A AND l.t + B AND l.v % 7 <> 0
#
# with random bounds A and B, random watermark delays per side and a
# random multiple_watermark_policy.  Random events of both sides (a few
# keys and NULL keys, event times that move on with jitter, and some far
# behind: late) are produced in random chunks, some of one side only, and
# after each chunk every stream runs its due batches with run_batch until
# it returns NULL (the chunk's data batch, then the no-data batch when the
# watermark moved): the chunks are the batch splits.  The same events go
# into a plain table, and after every chunk each sink must equal what
# plain SQL over that table says (EXCEPT ALL both ways):
#
#   W(c)        the watermark after chunk c: min (or max) over the sides of
#               max(event time of the side's rows in chunks <= c) - its
#               delay, a side without rows counting as 1970;
#   late        a row of chunk c with t <= W(c - 1): dropped;
#   L, R        the rows of chunks <= c that are not late;
#   inner       the pairs of L and R that meet the condition;
#   left outer  those, and (l, NULL) for each l in L without a pair that
#               can have none any more: l.t + B <= W(c) (every partner
#               would be late), or l.v % 7 = 0 (the condition's part over
#               the left alone fails);
#   full outer  those, and (NULL, r) for each r in R without a pair with
#               r.t + A <= W(c);
#   semi        each l in L with a pair;
#   anti        each l in L that left outer gives a NULL row.
# A final chunk of one row per side a day later (NULL keys: they match
# nothing, and stay stored) is the watermark flush that gives the last
# NULL rows.  Each stream's num_late_rows must add up to the late rows, and
# each side's last numRowsTotal (counted on from batch to batch) must be
# its state table's rows.
#
# The random choices come from the seed printed at the start;
# STREAMING_TEST_SEED=N replays them.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $seed = test_seed();
my $rounds = 3;

my $kafka = StreamingTest::Kafka->start;
my $node = streaming_node('main');
$node->safe_psql('postgres',
	'CREATE TABLE ev (round int, side text, id int, k int, v int, t timestamptz, chunk int)');

my %joins = (
	inner => 'SELECT l.id AS lid, r.id AS rid FROM %1$s_l l JOIN %1$s_r r ON %2$s',
	left  => 'SELECT l.id AS lid, r.id AS rid FROM %1$s_l l LEFT JOIN %1$s_r r ON %2$s',
	full  => 'SELECT l.id AS lid, r.id AS rid FROM %1$s_l l FULL JOIN %1$s_r r ON %2$s',
	semi  => 'SELECT l.id AS lid FROM %1$s_l l WHERE EXISTS (SELECT FROM %1$s_r r WHERE %2$s)',
	anti  => 'SELECT l.id AS lid FROM %1$s_l l WHERE NOT EXISTS (SELECT FROM %1$s_r r WHERE %2$s)');
my @kinds = sort keys %joins;

sub pick { return $_[ int(rand(@_)) ]; }

sub iso
{
	my ($epoch) = @_;
	my @t = gmtime(int($epoch));
	return sprintf('%04d-%02d-%02d %02d:%02d:%02d.%03d+00',
		$t[5] + 1900, $t[4] + 1, @t[ 3, 2, 1, 0 ], int(($epoch - int($epoch)) * 1000 + 0.5) % 1000);
}

for my $round (1 .. $rounds)
{
	my $p = "r$round";
	my ($a, $b) = (pick(0, 2, 5, 30), pick(0, 3, 10, 40));
	my ($dl, $dr) = (pick(0, 1, 5, 20, 60), pick(0, 1, 5, 20, 60));
	my $policy = pick('min', 'max');
	my $nkeys = pick(2, 5, 20);
	note "round $round: A $a s, B $b s, delays $dl s / $dr s, policy $policy, $nkeys keys";
	my $cond = "l.k = r.k AND r.t BETWEEN l.t - interval '$a seconds' AND l.t + interval '$b seconds' AND l.v % 7 <> 0";

	my %topic;
	for my $side ('l', 'r')
	{
		($topic{$side}) = $kafka->create_topic("prop022_${p}_$side", 1);
		$node->safe_psql('postgres',
			"SELECT streaming.create_kafka_source('${p}_$side', "
			  . StreamingTest::quote_literal($kafka->bootstrap)
			  . ", topics => ARRAY[" . StreamingTest::quote_literal($topic{$side})
			  . "], starting_offsets => 'earliest', columns => 'id int, k int, v int, t timestamptz')");
	}
	for my $kind (@kinds)
	{
		my $q = sprintf($joins{$kind}, $p, $cond);
		$node->safe_psql('postgres',
			"SELECT streaming.create_stream('${p}_$kind', " . StreamingTest::quote_literal($q)
			  . ", watermarks => '{\"l\": {\"event_time\": \"t\", \"delay\": \"$dl seconds\"}, "
			  . "\"r\": {\"event_time\": \"t\", \"delay\": \"$dr seconds\"}}', "
			  . "multiple_watermark_policy => '$policy', start => false)");
	}

	# the expected rows after chunk c, by plain SQL over ev
	$node->safe_psql('postgres', qq{
CREATE FUNCTION ${p}_wm(c int) RETURNS timestamptz LANGUAGE sql STABLE AS \$\$
    SELECT ${policy}(coalesce(m - d, 'epoch'))
    FROM (VALUES ('l', interval '$dl seconds'), ('r', interval '$dr seconds')) s(side, d)
    LEFT JOIN LATERAL (SELECT max(t) AS m FROM ev WHERE round = $round AND ev.side = s.side AND chunk <= c) x ON true
\$\$;
CREATE FUNCTION ${p}_rows(c int, s text) RETURNS SETOF ev LANGUAGE sql STABLE AS \$\$
    SELECT * FROM ev WHERE round = $round AND side = s AND chunk <= c AND t > ${p}_wm(chunk - 1)
\$\$;
CREATE FUNCTION ${p}_expected(c int, kind text) RETURNS TABLE (lid int, rid int) LANGUAGE sql STABLE AS \$\$
    WITH l AS (SELECT * FROM ${p}_rows(c, 'l')), r AS (SELECT * FROM ${p}_rows(c, 'r')),
    pairs AS (SELECT l.id AS lid, r.id AS rid FROM l JOIN r ON $cond),
    w AS (SELECT ${p}_wm(c) AS w)
    SELECT lid, rid FROM pairs WHERE kind IN ('inner', 'left', 'full')
    UNION ALL
    SELECT l.id, NULL FROM l, w WHERE kind IN ('left', 'full', 'anti')
      AND NOT EXISTS (SELECT FROM pairs WHERE pairs.lid = l.id)
      AND (l.t + interval '$b seconds' <= w.w OR l.v % 7 = 0)
    UNION ALL
    SELECT NULL, r.id FROM r, w WHERE kind = 'full'
      AND NOT EXISTS (SELECT FROM pairs WHERE pairs.rid = r.id)
      AND r.t + interval '$a seconds' <= w.w
    UNION ALL
    SELECT DISTINCT lid, NULL::int FROM pairs WHERE kind = 'semi'
\$\$;
CREATE FUNCTION ${p}_diff(c int, kind text) RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE
    extra text;
    missing text;
BEGIN
    IF kind IN ('semi', 'anti') THEN
        EXECUTE format('SELECT string_agg(x::text, '' '') FROM (SELECT lid, NULL::int FROM %I EXCEPT ALL SELECT * FROM ${p}_expected(\$1, \$2)) x', '${p}_' || kind)
            INTO extra USING c, kind;
        EXECUTE format('SELECT string_agg(x::text, '' '') FROM (SELECT * FROM ${p}_expected(\$1, \$2) EXCEPT ALL SELECT lid, NULL::int FROM %I) x', '${p}_' || kind)
            INTO missing USING c, kind;
    ELSE
        EXECUTE format('SELECT string_agg(x::text, '' '') FROM (TABLE %I EXCEPT ALL SELECT * FROM ${p}_expected(\$1, \$2)) x', '${p}_' || kind)
            INTO extra USING c, kind;
        EXECUTE format('SELECT string_agg(x::text, '' '') FROM (SELECT * FROM ${p}_expected(\$1, \$2) EXCEPT ALL TABLE %I) x', '${p}_' || kind)
            INTO missing USING c, kind;
    END IF;
    RETURN coalesce('extra: ' || extra, '') || coalesce(' missing: ' || missing, '');
END \$\$;
});

	# events: each side's time moves on about a second a row, with jitter;
	# a few rows far behind (late, unless the watermark is behind too)
	my $base = 1_704_067_200 + $round * 86_400;
	my %clock = (l => $base, r => $base);
	my %next_id = (l => 1, r => 1);
	my $nchunks = 6 + int(rand(10));
	my ($mismatches, $checks) = (0, 0);
	for my $chunk (1 .. $nchunks + 1)
	{
		my $flush = $chunk > $nchunks;
		my $shape = pick('both', 'both', 'l', 'r');
		my (%lines, @rows);
		for my $side ('l', 'r')
		{
			next unless $flush || $shape eq 'both' || $shape eq $side;
			my $n = $flush ? 1 : 1 + int(rand(40));
			for (1 .. $n)
			{
				my $id = $next_id{$side}++;
				$clock{$side} += rand(2);
				my $t = $clock{$side} + rand(8) - 4;
				$t = $clock{$side} - 30 - rand(120) if rand() < 0.06;
				$t = $base + 86_400 if $flush;
				my $k = $flush || rand() < 0.08 ? 'null' : int(rand($nkeys));
				my $v = int(rand(100));
				push @{ $lines{$side} }, sprintf('{"id": %d, "k": %s, "v": %d, "t": "%s"}', $id, $k, $v, iso($t));
				push @rows, sprintf("(%d, '%s', %d, %s, %d, '%s', %d)", $round, $side, $id, $k, $v, iso($t), $chunk);
			}
			$kafka->produce_lines($topic{$side}, $lines{$side});
		}
		$node->safe_psql('postgres', 'INSERT INTO ev VALUES ' . join(', ', @rows));
		# every stream's due batches, then every sink against its expected
		# rows: one statement each (new sessions are slow on a loaded machine)
		$node->safe_psql('postgres',
			"DO \$\$ DECLARE s text; BEGIN FOREACH s IN ARRAY ARRAY['"
			  . join("', '", map { "${p}_$_" } @kinds)
			  . "'] LOOP WHILE streaming.run_batch(s) IS NOT NULL LOOP END LOOP; END LOOP; END \$\$");
		my @diffs = split /\n/, $node->safe_psql('postgres',
			join(' UNION ALL ', map { "SELECT '$_', ${p}_diff($chunk, '$_')" } @kinds), extra_params => ['-F', "\t"]), -1;
		is(scalar(@diffs), scalar(@kinds), "round $round, chunk $chunk: a check per stream") unless @diffs == @kinds;
		for (@diffs)
		{
			my ($kind, $diff) = split /\t/, $_, 2;
			$checks++;
			next if $diff eq '';
			$mismatches++;
			diag("round $round, chunk $chunk, $kind: $diff") if $mismatches <= 5;
		}
	}
	is($mismatches, 0, "round $round: after each of $nchunks chunks and the flush, every sink is its join over all rows so far ($checks checks)");

	my $late = $node->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE round = $round AND t <= ${p}_wm(chunk - 1)");
	my $sizes = join ', ', map { "$_ " . $node->safe_psql('postgres', "SELECT count(*) FROM ${p}_$_") } @kinds;
	note "round $round: $late late rows; $sizes";
	for my $kind (@kinds)
	{
		is($node->safe_psql('postgres',
				"SELECT coalesce(sum(num_late_rows), 0) FROM streaming.progress WHERE stream = '${p}_$kind'"),
			$late, "round $round, $kind: num_late_rows adds up to the late rows");
	}
	# each side's numRowsTotal, counted on from batch to batch, is its state table's rows
	$node->safe_psql('postgres', q{
CREATE OR REPLACE FUNCTION state_count_errors(s text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n bigint;
    bad text := '';
BEGIN
    FOR r IN SELECT o.value->>'side' AS side, (o.value->>'numRowsTotal')::bigint AS total, d.id
             FROM streaming.progress p, jsonb_each(p.state_operators) o, streaming.stream_defs d
             WHERE p.stream = s AND d.name = s
               AND p.batch_id = (SELECT max(batch_id) FROM streaming.progress WHERE stream = s)
    LOOP
        EXECUTE format('SELECT count(*) FROM streaming.join_%s_%s', r.id, r.side) INTO n;
        IF n IS DISTINCT FROM r.total THEN
            bad := bad || format('%s: numRowsTotal %s, table %s; ', r.side, r.total, n);
        END IF;
    END LOOP;
    RETURN bad;
END $$});
	for my $kind (@kinds)
	{
		is($node->safe_psql('postgres', "SELECT state_count_errors('${p}_$kind')"), '',
			"round $round, $kind: numRowsTotal is the state tables' rows");
	}
	# the flush gave NULL rows: the outer sinks hold some, unless no row was left unmatched
	is($node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM ${p}_left WHERE rid IS NULL) = (SELECT count(*) FROM ${p}_expected($nchunks + 1, 'left') WHERE rid IS NULL)"),
		't', "round $round: the left join's NULL rows are all there after the flush");
}

$node->stop;
done_testing();
