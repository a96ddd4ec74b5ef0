# 007_property.pl: a property test of aggregate streams (issue 3, item 6).
#
# For random in-order input split into random batches, every aggregate
# stream's sink must equal a plain GROUP BY over the same records:
#
#   complete and update mode   after every batch, GROUP BY over all records
#                              read so far;
#   append mode                after every batch, the windows of that GROUP BY
#                              that the stream's watermark closed (window end
#                              <= watermark); at the end a record with a far
#                              later event time closes every other window, so
#                              the sink then holds them all.
#
# Each round makes a new topic, source and set of streams (tumbling, sliding,
# session and no window; complete, update and append modes; random window
# sizes, slides, gaps, origins and watermark delays), then produces random
# chunks of records and after each one runs every stream's batches with
# streaming.run_batch() in this test's session until it returns NULL (this
# runs the no-data batches too; no worker runs these streams).  Records have
# nondecreasing event times (equal ones, small gaps, and gaps larger than
# the windows), a few group keys, one of them NULL-able (NULL is one group:
# the sinks create_stream makes for update and complete mode have a unique
# key that treats NULLs as equal), and int,
# numeric, float8 and boolean values with NULLs; one key filtered by a WHERE
# clause, one key with only NULL values.  The same JSON lines go into an
# ordinary table, and the expected results are views over it: date_bin for
# tumbling windows, a generate_series expansion for sliding ones, gaps and
# islands for sessions.  Sink and expected rows are compared with EXCEPT ALL
# both ways, row counts, and for the float8 aggregate within a relative
# 1e-9 (its combine function need not give the bits of a sequential
# aggregation).  Since the input is in order no row may be late
# (progress.num_late_rows = 0), and after each round streaming.progress must
# show that every record was read once.
#
# Why session windows in append and update mode use a delay > 0: with delay
# 0 a session [s, e) closes when the watermark reaches e, and a record at
# exactly e, not late and in order, starts a new session that only touches
# the closed one; it would merge with it in a GROUP BY over all records, but
# the closed session was already written.  With a delay > 0 every later
# record is past e.
#
# Rounds take turns over parallel_workers_list (0 and 2 by default,
# STREAMING_TEST_PARALLEL_WORKERS chooses): in a round with N > 0 every
# stream has parallel_workers => N, so each run_batch reads and
# pre-aggregates its records in N helpers and combines their partial
# states (session windows: the helpers parse and filter, the worker
# merges the sessions).
#
# STREAMING_TEST_SEED=N replays the random choices of a run; the seed and
# every round's parameters and chunk sizes are printed.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use List::Util qw(max min shuffle);
use POSIX qw(floor strftime);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $seed = test_seed();
my $rounds = 4;

my $kafka = StreamingTest::Kafka->start;
my $node = streaming_node('main');
# the setup may have drawn random numbers (a free port): replay from here
srand($seed);

# the aggregates of every stream: the same text in the stream query and in
# the plain GROUP BY; vpf (float8) is compared within a tolerance, the rest
# exactly
my $AGGS = join ', ', 'count(*) AS n', 'count(x) AS nx', 'sum(x) AS sx',
  'sum(v) AS sv', 'avg(v) AS av', 'min(x) AS mnx', 'max(v) AS mxv',
  'stddev_samp(v) AS sdv', 'var_pop(f) AS vpf', 'bool_and(ok) AS band',
  'bit_or(x) AS bor', 'pt_sumsq(x) AS ssq', 'max(ts) AS last_ts';
my @EXACT = qw(n nx sx sv av mnx mxv sdv band bor ssq last_ts);
my $COLUMNS = 'k text, g int, x int, v numeric, f float8, ok boolean, ts timestamptz';

$node->safe_psql(
	'postgres', q{
-- a user-defined aggregate with a combine function: the sum of squares
CREATE FUNCTION pt_sumsq_step(s bigint, x bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT s + x * x';
CREATE AGGREGATE pt_sumsq(bigint) (sfunc = pt_sumsq_step, stype = bigint,
    combinefunc = int8pl, initcond = '0', parallel = safe);
-- every batch of a stream until there is nothing to do, each in its own
-- transaction (the no-data batch that a batch makes due sees it committed)
CREATE PROCEDURE pt_drain(s text, INOUT batches int DEFAULT 0) LANGUAGE plpgsql AS $$
DECLARE
    b bigint;
BEGIN
    LOOP
        b := streaming.run_batch(s);
        COMMIT;
        EXIT WHEN b IS NULL;
        batches := batches + 1;
        IF batches > 1000 THEN
            RAISE EXCEPTION 'stream % still has batches to run after 1000', s;
        END IF;
    END LOOP;
END
$$;
});

# --- random input ------------------------------------------------------

sub pick { return $_[ int(rand(scalar @_)) ]; }

sub sql_quote
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# a random numeric with 0 to 4 decimals (its scale as written), sometimes
# large
sub rand_numeric
{
	my $scale = int(rand(5));
	my $units = int(rand(2000)) - 1000;
	$units = $units * 1_000_000_007 + int(rand(1000)) if rand() < 0.05;
	my $frac = $scale ? sprintf('.%0*d', $scale, int(rand(10**$scale))) : '';
	my $sign = ($units == 0 && rand() < 0.3) ? '-' : '';
	return "$sign$units${frac}e" . (int(rand(5)) - 2) if rand() < 0.05;
	return "$sign$units$frac";
}

# records(N, PARAMS): N JSON lines with nondecreasing event times, and the
# event time of the last one (epoch milliseconds)
sub records
{
	my ($n, $p, $t) = @_;
	my @keys = @{ $p->{keys} };
	my $unit = max($p->{size}, $p->{hop_size}, $p->{gap});
	my @lines;
	for (1 .. $n)
	{
		my $r = rand();
		my $step_s =
			$r < 0.25 ? 0
		  : $r < 0.70 ? int(rand($p->{size} / 4 + 1))
		  : $r < 0.93 ? int(rand(1.5 * $p->{size}))
		  :             int((2 + rand(4)) * $unit);
		$t += 1000 * $step_s;
		$t += int(rand(1000)) if rand() < 0.2;    # milliseconds
		push @lines, record_line(pick(@keys), $t);
	}
	return (\@lines, $t);
}

sub record_line
{
	my ($k, $t, %fixed) = @_;
	my $null = $k eq 'nul';    # this key's values are all NULL
	my %f = (
		k => qq{"$k"},
		g => (rand() < 0.25 ? 'null' : int(rand(3))),
		x => ($null || rand() < 0.15 ? 'null' : int(rand(200)) - 60),
		v => ($null || rand() < 0.15 ? 'null' : rand_numeric()),
		f => ($null || rand() < 0.15 ? 'null'
			: rand() < 0.1 ? sprintf('%de-3', int(rand(4000)) - 1000)
			: (int(rand(4000)) - 1000) / 8),
		ok => ($null || rand() < 0.2 ? 'null' : (rand() < 0.85 ? 'true' : 'false')),
		ts => sprintf('"%s.%03dZ"',
			strftime('%Y-%m-%dT%H:%M:%S', gmtime(int($t / 1000))), $t % 1000),
		%fixed);
	return '{' . join(', ', map { qq{"$_": $f{$_}} } shuffle(sort keys %f)) . '}';
}

# --- the streams of a round and their expected results -------------------

# Each stream: name, output mode, query (over source $src), the expected
# rows as a query over the input table, key columns (for the float join),
# and whether its sink is made by the test (append mode: a table of its
# own, without a key).
sub stream_specs
{
	my ($r, $p) = @_;
	my $src = "pt_src_$r";
	my $in = "pt_in_$r";
	my $where = "k <> 'skip'";
	my $size = "interval '$p->{size} seconds'";
	my $origin = defined $p->{origin} ? "timestamptz '$p->{origin}'" : "timestamptz 'epoch'";
	my $tumble_args = "ts, '$p->{size} seconds'" . (defined $p->{origin} ? ", '$p->{origin}'" : '');
	my $hsize = "interval '$p->{hop_size} seconds'";
	my $hslide = "interval '$p->{hop_slide} seconds'";
	my $hop_args = "ts, '$p->{hop_size} seconds', '$p->{hop_slide} seconds'"
	  . (defined $p->{origin} ? ", '$p->{origin}'" : '');
	my $hop_n = floor($p->{hop_size} / $p->{hop_slide}) + 1;
	my $gap = "interval '$p->{gap} seconds'";
	my $win = 'streaming.window_start() AS ws, streaming.window_end() AS we';

	my $tumble_exp = sub {
		my ($keys, $w) = @_;
		return "SELECT date_bin($size, ts, $origin) AS ws, date_bin($size, ts, $origin) + $size AS we, "
		  . "$keys, $AGGS FROM $in"
		  . ($w ? " WHERE $w" : '')
		  . " GROUP BY 1, 2, $keys";
	};
	my $hop_exp = sub {
		my ($keys, $w) = @_;
		return "SELECT h.hs AS ws, h.hs + $hsize AS we, $keys, $AGGS FROM $in i "
		  . "CROSS JOIN LATERAL (SELECT date_bin($hslide, i.ts, $origin) - j * $hslide AS hs "
		  . "FROM generate_series(0, $hop_n) j) h WHERE h.hs + $hsize > i.ts"
		  . ($w ? " AND $w" : '')
		  . " GROUP BY 1, 2, $keys";
	};
	# sessions per group: a record more than the gap after the one before it
	# starts a new session ([first ts, last ts + gap) ranges that overlap or
	# touch are one session)
	my $session_exp = sub {
		my ($keys, $w) = @_;
		return "SELECT min(ts) AS ws, max(ts) + $gap AS we, $keys, $AGGS FROM ("
		  . "SELECT *, sum(brk) OVER (PARTITION BY $keys ORDER BY ts ROWS UNBOUNDED PRECEDING) AS sid FROM ("
		  . "SELECT *, CASE WHEN ts > lag(ts) OVER (PARTITION BY $keys ORDER BY ts) + $gap THEN 1 ELSE 0 END AS brk "
		  . "FROM $in"
		  . ($w ? " WHERE $w" : '')
		  . ") r) s GROUP BY $keys, sid";
	};
	my $wm = sub {
		my ($d) = @_;
		return defined $d ? (watermark => "'$d seconds'") : ();
	};

	my @s = (
		{
			name => "pt_tc_$r", mode => 'complete', keys => 'k',
			query => "SELECT $win, k, $AGGS FROM $src WHERE $where GROUP BY streaming.tumble($tumble_args), k",
			expected => $tumble_exp->('k', $where),
			opts => { $wm->($p->{tc_delay}) },
		},
		{
			name => "pt_hc_$r", mode => 'complete', keys => 'k',
			query => "SELECT $win, k, $AGGS FROM $src GROUP BY streaming.hop($hop_args), k",
			expected => $hop_exp->('k'),
		},
		{
			name => "pt_gc_$r", mode => 'complete', keys => 'k, g',
			query => "SELECT k, g, $AGGS FROM $src GROUP BY k, g",
			expected => "SELECT k, g, $AGGS FROM $in GROUP BY k, g",
		},
		{
			name => "pt_ta_$r", mode => 'append', keys => 'k, g', own_sink => 1,
			query => "SELECT $win, k, g, $AGGS FROM $src WHERE $where GROUP BY streaming.tumble($tumble_args), k, g",
			expected => $tumble_exp->('k, g', $where),
			opts => { $wm->($p->{ta_delay}) },
		},
		{
			name => "pt_ha_$r", mode => 'append', keys => 'k', windows => 'hop',
			query => "SELECT $win, k, $AGGS FROM $src GROUP BY streaming.hop($hop_args), k",
			expected => $hop_exp->('k'),
			opts => { $wm->($p->{ha_delay}) },
		},
		{
			name => "pt_tu_$r", mode => 'update', keys => 'k, g',
			query => "SELECT $win, k, g, $AGGS FROM $src GROUP BY streaming.tumble($tumble_args), k, g",
			expected => $tumble_exp->('k, g'),
			opts => { $wm->($p->{tu_delay}) },
		});
	push @s,
	  {
		name => "pt_sc_$r", mode => 'complete', keys => 'k', session => 1,
		query => "SELECT $win, k, $AGGS FROM $src GROUP BY streaming.session(ts, '$p->{gap} seconds'), k",
		expected => $session_exp->('k'),
	  },
	  {
		name => "pt_sa_$r", mode => 'append', keys => 'k, g', own_sink => 1, session => 1,
		query => "SELECT $win, k, g, $AGGS FROM $src WHERE $where "
		  . "GROUP BY streaming.session(ts, '$p->{gap} seconds'), k, g",
		expected => $session_exp->('k, g', $where),
		opts => { $wm->($p->{sa_delay}) },
	  },
	  {
		name => "pt_su_$r", mode => 'update', keys => 'k, g', session => 1,
		query => "SELECT $win, k, g, $AGGS FROM $src GROUP BY streaming.session(ts, '$p->{gap} seconds'), k, g",
		expected => $session_exp->('k, g'),
		opts => { $wm->($p->{su_delay}) },
	  };
	for my $s (@s)
	{
		$s->{windowed} = $s->{query} =~ /GROUP BY streaming\./;
		$s->{keycols} = ($s->{windowed} ? 'ws, we, ' : '') . $s->{keys};
		$s->{cols} = join ', ', $s->{keycols}, @EXACT;
		$s->{delay} = $s->{opts}{watermark};
	}
	return @s;
}

# create_streams(ROUND, STREAMS): the expected views, the sinks the test
# makes, and the streams; returns the streams created.
sub create_streams
{
	my ($r, @streams) = @_;
	my @created;
	for my $s (@streams)
	{
		my $sql = "BEGIN;\nCREATE VIEW pt_exp_$s->{name} AS $s->{expected};\n";
		$sql .= "CREATE TABLE $s->{name} AS SELECT * FROM pt_exp_$s->{name} WITH NO DATA;\n"
		  if $s->{own_sink};
		my %o = %{ $s->{opts} || {} };
		$o{parallel_workers} = $s->{parallel_workers} if $s->{parallel_workers};
		my $opts = join '',
		  map { ", $_ => $o{$_}" } sort keys %o;
		$sql .= "SELECT streaming.create_stream('$s->{name}', "
		  . sql_quote($s->{query})
		  . ", output_mode => '$s->{mode}'$opts, start => false);\nCOMMIT;\n";
		my ($ret, $out, $err) = $node->psql('postgres', $sql);
		if ($ret == 0)
		{
			push @created, $s;
			next;
		}
		fail("round $r: $s->{name} can be created");
		diag("$s->{query}\n$err");
		die "round $r: could not create stream $s->{name}\n";
	}
	return @created;
}

# --- checks --------------------------------------------------------------

# the rows a sink must hold now: all expected rows, or in append mode those
# of the windows the stream's watermark closed
sub expected_rows
{
	my ($s) = @_;
	my $e = "pt_exp_$s->{name}";
	return $s->{mode} eq 'append'
	  ? "(SELECT * FROM $e WHERE we <= (SELECT watermark FROM streaming.streams WHERE name = '$s->{name}'))"
	  : $e;
}

sub float_mismatch_sql
{
	my ($s) = @_;
	my $on = join ' AND ',
	  map { "s.$_ IS NOT DISTINCT FROM e.$_" } split /, /, $s->{keycols};
	return "SELECT s.*, e.vpf AS expected_vpf FROM $s->{name} s JOIN "
	  . expected_rows($s)
	  . " e ON $on WHERE (s.vpf IS NULL) <> (e.vpf IS NULL) "
	  . "OR abs(s.vpf - e.vpf) > 1e-9 * greatest(1, abs(e.vpf))";
}

# check(WHAT, CONTEXT, STREAMS): every sink against its expected rows, in
# one query; on a difference, the differing rows are printed
sub check
{
	my ($what, $context, @streams) = @_;
	my $sql = join "\nUNION ALL\n", map {
		my $s = $_;
		my $e = expected_rows($s);
		"SELECT '$s->{name}', "
		  . "(SELECT count(*) FROM (SELECT $s->{cols} FROM $s->{name} EXCEPT ALL SELECT $s->{cols} FROM $e x) d), "
		  . "(SELECT count(*) FROM (SELECT $s->{cols} FROM $e x EXCEPT ALL SELECT $s->{cols} FROM $s->{name}) d), "
		  . "(SELECT count(*) FROM $s->{name}), (SELECT count(*) FROM $e x), "
		  . "(SELECT count(*) FROM (" . float_mismatch_sql($s) . ") d)"
	} @streams;
	my %res = map { my @f = split /\|/; (shift(@f) => \@f) }
	  split /\n/, $node->safe_psql('postgres', $sql);
	for my $s (@streams)
	{
		my ($extra, $missing, $nsink, $nexp, $nfloat) = @{ $res{ $s->{name} } };
		my $ok = ok($extra == 0 && $missing == 0 && $nsink == $nexp && $nfloat == 0,
			"$what: $s->{name} ($s->{mode}) equals the plain GROUP BY ($nexp rows)");
		next if $ok;
		my $e = expected_rows($s);
		diag("$context\n$s->{name}: $extra rows only in the sink, $missing only in the expected rows, "
			  . "$nsink sink rows, $nexp expected, $nfloat with a different vpf\n"
			  . "query: $s->{query}\nexpected: $s->{expected}");
		my ($ret, $out, $err) = $node->psql(
			'postgres',
			"SELECT 'sink only' AS side, * FROM (SELECT $s->{cols} FROM $s->{name} EXCEPT ALL SELECT $s->{cols} FROM $e x) d "
			  . "UNION ALL SELECT 'expected only', * FROM (SELECT $s->{cols} FROM $e x EXCEPT ALL SELECT $s->{cols} FROM $s->{name}) d "
			  . "ORDER BY 2, 3, 4, 1 LIMIT 40; "
			  . "SELECT 'vpf differs', * FROM (" . float_mismatch_sql($s) . ' LIMIT 10) f; '
			  . "SELECT format('batch %s: %s input rows, %s output rows, %s late, %s state rows, "
			  . "max event time %s, watermark %s', batch_id, num_input_rows, num_output_rows, "
			  . "num_late_rows, num_state_rows, max_event_time, watermark) "
			  . "FROM streaming.progress WHERE stream = '$s->{name}' ORDER BY batch_id DESC LIMIT 5",
			extra_params => [ '-P', 'footer=off' ]);
		diag("differences (first 40):\nside|$s->{cols}\n$out\n$err");
	}
	return;
}

# --- the rounds ------------------------------------------------------------

my $base = 1_709_251_200_000;    # 2024-03-01 00:00:00 UTC, in ms
my @pws = parallel_workers_list();
for my $r (1 .. $rounds)
{
	my $pw = $pws[ ($r - 1) % @pws ];
	my $size = pick(10, 15, 30, 60, 120);
	my $slide = pick(5, 10, 20, 30);
	my %p = (
		size => $size,
		hop_slide => $slide,
		hop_size => $slide * (1 + int(rand(4))) + (rand() < 0.3 ? int($slide / 2) : 0),
		gap => pick(3, 10, 30, 60),
		# none (the epoch), or one before or after the records
		origin => (rand() < 0.4 ? undef
			: strftime('%Y-%m-%d %H:%M:%S+00',
				gmtime(pick(1_704_067_200, 1_924_992_000) + int(rand(600))))),
		tc_delay => (rand() < 0.5 ? undef : pick(0, 10)),
		ta_delay => pick(0, 0, 5, 30, 90),
		ha_delay => pick(0, 5, 30, 90),
		tu_delay => (rand() < 0.5 ? undef : pick(0, 20)),
		sa_delay => pick(1, 10, 40),
		su_delay => (rand() < 0.5 ? undef : pick(1, 30)),
		keys => [ 'a', 'a', grep { rand() < 0.6 } ('b', 'c', 'nul', 'skip', '', "o'k") ],
		nparts => pick(1, 1, 3),
	);
	my $nrecords = 80 + int(rand(160));
	my @chunks;
	for (my $left = $nrecords; $left > 0;)
	{
		my $c = min($left, 1 + int(rand(rand() < 0.3 ? 5 : 60)));
		push @chunks, $c;
		$left -= $c;
	}

	my ($topic, $nparts) = $kafka->create_topic("pt_round_$r", $p{nparts});
	# one partition: the source may cut chunks into smaller batches (with
	# several it could read them out of event-time order)
	my $max_offsets = $nparts == 1 && rand() < 0.5 ? 5 + int(rand(40)) : undef;
	my $params = join ', ',
	  map { "$_ " . (ref $p{$_} ? '[' . join(', ', map { "\"$_\"" } @{ $p{$_} }) . ']' : $p{$_} // 'none') } sort keys %p;
	my $context = "seed $seed, round $r: $params, partitions $nparts, max_offsets_per_trigger "
	  . ($max_offsets // 'none') . ", parallel_workers $pw, chunks @chunks";
	note $context;

	$node->safe_psql('postgres',
		"CREATE TABLE pt_in_$r ($COLUMNS);\n"
		  . "SELECT streaming.create_kafka_source('pt_src_$r', "
		  . sql_quote($kafka->bootstrap)
		  . ", topics => ARRAY[" . sql_quote($topic) . "], starting_offsets => 'earliest', "
		  . "columns => '$COLUMNS'"
		  . (defined $max_offsets ? ", max_offsets_per_trigger => $max_offsets" : '') . ')');
	my @streams = stream_specs($r, \%p);
	for my $s (@streams)
	{
		$s->{parallel_workers} = $pw;
	}
	@streams = create_streams($r, @streams);

	my $drain_sql = join '', map { "CALL pt_drain('$_->{name}');\n" } shuffle(@streams);
	my $t = $base + 1000 * int(rand(86_400));
	my $produced = 0;
	my $produce = sub {
		my ($lines) = @_;
		$kafka->produce_lines($topic, $lines);
		$produced += scalar @$lines;
		$node->safe_psql('postgres',
			"INSERT INTO pt_in_$r SELECT (jsonb_populate_record(NULL::pt_in_$r, l::jsonb)).* FROM (VALUES "
			  . join(', ', map { "(\$j\$$_\$j\$)" } @$lines) . ") v(l)");
		my ($ret, $out, $err) = $node->psql('postgres', $drain_sql);
		if ($ret != 0)
		{
			fail("round $r: every batch runs");
			diag("$context\nafter $produced records: $err");
			diag_stream($node, $_->{name}) for @streams;
			die "round $r: a batch failed\n";
		}
	};
	for my $c (0 .. $#chunks)
	{
		my $lines;
		($lines, $t) = records($chunks[$c], \%p, $t);
		$produce->($lines);
		check("round $r, chunk " . ($c + 1) . " of " . scalar(@chunks) . " ($produced records)",
			"$context; failed after chunk " . ($c + 1), @streams);
	}

	# one record far later closes every window, and every session, of the
	# records so far
	$t += 86_400_000;
	$produce->([ record_line('a', $t, x => 1) ]);
	check("round $r, after the last record", "$context; failed after the last record", @streams);

	my $last = strftime('%Y-%m-%d %H:%M:%S', gmtime(int($t / 1000))) . sprintf('.%03d+00', $t % 1000);
	# streaming.progress and the watermark, of all streams in one query
	my %id = map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres', 'SELECT name, id FROM streaming.stream_defs');
	my $sql = join "\nUNION ALL\n", map {
		my $s = $_;
		my $n = $s->{name};
		my $wm = "(SELECT watermark FROM streaming.streams WHERE name = '$n')";
		# the state: every group, but in append and update mode with a
		# watermark only those of open windows (session state is left to
		# the implementation)
		my $evicts = defined $s->{delay} && $s->{mode} ne 'complete';
		"SELECT '$n', sum(num_input_rows), "
		  . "count(*) FILTER (WHERE prev_id IS NOT NULL AND (prev_id <> batch_id - 1 "
		  . "OR start_positions IS DISTINCT FROM prev_end)), "
		  . "sum(num_late_rows), "
		  . ($s->{session} ? "'-'" : "(array_agg(num_state_rows ORDER BY batch_id DESC))[1]::text")
		  . ", (SELECT count(*) FROM pt_exp_$n" . ($evicts ? " WHERE we > $wm" : '') . ')::text, '
		  # the state rows the batches counted on (stream_defs.state_rows)
		  # against the table's, sessions too
		  . "((array_agg(num_state_rows ORDER BY batch_id DESC))[1] = "
		  . "(SELECT count(*) FROM streaming.state_$id{$n}))::text, "
		  . (defined $s->{delay}
			? "($wm = greatest(timestamptz 'epoch', timestamptz '$last' - interval $s->{delay}))::text, "
			  . "(SELECT count(*) FROM pt_exp_$n WHERE we > $wm)::text"
			: "'-', '-'")
		  . " FROM (SELECT *, lag(end_positions) OVER (ORDER BY batch_id) AS prev_end, "
		  . "lag(batch_id) OVER (ORDER BY batch_id) AS prev_id "
		  . "FROM streaming.progress WHERE stream = '$n') b"
	} @streams;
	my %end = map { my @f = split /\|/; (shift(@f) => \@f) }
	  split /\n/, $node->safe_psql('postgres', $sql);
	for my $s (@streams)
	{
		my $n = $s->{name};
		my ($input, $gaps, $late, $state, $groups, $counted, $wm_ok, $open) = @{ $end{$n} };
		is($input, $produced, "round $r: $n: the batches in streaming.progress read every record once");
		is($gaps, 0, "round $r: $n: batch ids are consecutive and each batch starts where the one before ended");
		is($late, 0, "round $r: $n: no late rows (the input is in order)");
		is($state, $groups,
			"round $r: $n: the state holds "
			  . (defined $s->{delay} && $s->{mode} ne 'complete'
				? 'the groups of the open windows' : 'every group'))
		  unless $s->{session};
		is($counted, 'true',
			"round $r: $n: the last batch's num_state_rows is the state table's count(*)");
		next unless defined $s->{delay};
		is($wm_ok, 'true', "round $r: $n: the watermark is the last event time minus $s->{delay}");
		# only the windows of the last record are still open: the checks
		# above covered all the others
		my $most = $s->{windows} ? floor($p{hop_size} / $p{hop_slide}) + 1 : 1;
		ok($open >= 1 && $open <= $most,
			"round $r: $n: at the end only the last record's windows are open ($open)")
		  if $s->{mode} eq 'append';
	}
}

# Group keys that are equal but written differently: GROUP BY puts numeric
# 1, 1.0 and 1.00 in one group, and float8 0 and -0; the streams must too
# (keyed by the values' binary form they were separate groups: in update
# mode they overwrote each other's sink row, in complete mode the batch
# failed on the sink's primary key).
{
	my ($topic) = $kafka->create_topic('pt_equal_keys', 1);
	$node->safe_psql('postgres',
		"SELECT streaming.create_kafka_source('pt_eq_src', "
		  . sql_quote($kafka->bootstrap)
		  . ", topics => ARRAY[" . sql_quote($topic) . "], starting_offsets => 'earliest', "
		  . "columns => 'v numeric, f float8, ts timestamptz');\n"
		  . "SELECT streaming.create_stream('pt_eq_upd', 'SELECT v, count(*) AS n FROM pt_eq_src GROUP BY v', "
		  . "output_mode => 'update', start => false);\n"
		  . "SELECT streaming.create_stream('pt_eq_all', 'SELECT v, count(*) AS n FROM pt_eq_src GROUP BY v', "
		  . "output_mode => 'complete', start => false);\n"
		  . "SELECT streaming.create_stream('pt_eq_float', 'SELECT f, count(*) AS n FROM pt_eq_src GROUP BY f', "
		  . "output_mode => 'update', start => false);");
	$kafka->produce_lines($topic,
		[ map { qq({"v": $_->[0], "f": $_->[1], "ts": "2024-03-01T00:00:00Z"}) }
			  ([ '1', '0' ], [ '1.0', '-0.0' ], [ '1.00', '0' ], [ '2.5', '0' ], [ '2.50', '-0' ]) ]);
	my %got;
	for my $s (qw(pt_eq_upd pt_eq_all pt_eq_float))
	{
		my $col = $s eq 'pt_eq_float' ? 'f' : 'v';
		my ($ret, $out, $err) = $node->psql('postgres',
			"CALL pt_drain('$s'); SELECT string_agg(n::text, ',' ORDER BY $col) FROM $s");
		$got{$s} = $ret == 0 ? $out : "batch failed: $err";
		$got{$s} =~ s/^\d+\n//;    # the procedure's output
	}
	is($got{pt_eq_upd}, '3,2', 'update mode: numeric keys 1, 1.0, 1.00 are one group, 2.5 and 2.50 another');
	is($got{pt_eq_all}, '3,2', 'complete mode: numeric keys 1, 1.0, 1.00 are one group, 2.5 and 2.50 another');
	is($got{pt_eq_float}, '5', 'update mode: float8 keys 0 and -0 are one group');
}

$node->stop;
done_testing();
