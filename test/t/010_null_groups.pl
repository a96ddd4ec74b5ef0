# 010_null_groups.pl: NULL group values under restarts (SPEC 3: NULL is one
# group, as in GROUP BY; SPEC 6).
#
# Four aggregate streams, run by their workers, read one topic whose records
# have NULLs in a text group column (g, every third record) and in an
# integer one (n, every fourth):
#   nl_update    update mode, no window: count and sum by g and n;
#   nl_window    update mode, 1-minute tumbling windows by g;
#   nl_complete  complete mode, no window: count and sum by n;
#   nl_session   update mode, 4-second session windows by g (the NULL
#                group's sessions merge as its records come in).
# The source takes at most 400 records per batch, so the streams work
# through each chunk of records in many batches; in each of 3 rounds a
# chunk is produced and the server is stopped "immediate" while the streams
# are at it.  At the end every sink must equal a plain GROUP BY over the
# same JSON lines (EXCEPT ALL both ways, NULLs equal), and
# streaming.progress must show every record read once.
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my @streams = qw(nl_update nl_window nl_complete nl_session);
my ($chunk, $rounds) = (3_000, 3);

# record i: event time 2024-06-01 00:00 UTC + i seconds
my @lines;
sub make_lines
{
	my ($n) = @_;
	my @new;
	for (1 .. $n)
	{
		my $i = scalar(@lines) + 1;
		my $g = $i % 3 == 0 ? 'null' : $i % 2 ? '"x"' : '"y"';
		my $k = $i % 4 == 0 ? 'null' : $i % 5;
		my ($h, $m, $s) = (int($i / 3600), int($i / 60) % 60, $i % 60);
		push @lines,
		  sprintf('{"g": %s, "n": %s, "v": %d, "ts": "2024-06-01T%02d:%02d:%02dZ"}',
			$g, $k, $i, $h, $m, $s);
		push @new, $lines[-1];
	}
	return \@new;
}

my $kafka = StreamingTest::Kafka->start;
my ($topic) = $kafka->create_topic('nulls_010', 4);
$kafka->produce_lines($topic, make_lines($chunk));

my $node = streaming_node('main');
$node->safe_psql(
	'postgres', qq{
SELECT streaming.create_kafka_source('nl_src', '@{[ $kafka->bootstrap ]}', topics => ARRAY['$topic'],
    starting_offsets => 'earliest', columns => 'g text, n int, v int, ts timestamptz',
    max_offsets_per_trigger => 400);
SELECT streaming.create_stream('nl_update',
    'SELECT g, n, count(*) AS c, sum(v) AS total FROM nl_src GROUP BY g, n', output_mode => 'update');
SELECT streaming.create_stream('nl_window',
    \$\$SELECT streaming.window_start() AS ws, g, count(*) AS c, sum(v) AS total
      FROM nl_src GROUP BY streaming.tumble(ts, '1 minute'), g\$\$, output_mode => 'update');
SELECT streaming.create_stream('nl_complete',
    'SELECT n, count(*) AS c, sum(v) AS total FROM nl_src GROUP BY n', output_mode => 'complete');
SELECT streaming.create_stream('nl_session',
    \$\$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, g, count(*) AS c, sum(v) AS total
      FROM nl_src GROUP BY streaming.session(ts, '4 seconds'), g\$\$, output_mode => 'update');
});

my $read_sql = join ' AND ',
  map { "coalesce((SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = '$_'), 0) >= %d" }
  @streams;
for my $round (1 .. $rounds)
{
	# the streams are inside the last chunk: they read some of it, not all
	my $before = scalar @lines;
	$kafka->produce_lines($topic, make_lines($chunk));
	wait_for($node, 'SELECT ' . sprintf($read_sql, ($before + 400) x @streams),
		't', "round $round: every stream read past record " . ($before + 400));
	$node->stop('immediate');
	$node->start;
	wait_for($node,
		"SELECT count(*) = " . scalar(@streams) . " FROM streaming.streams WHERE name LIKE 'nl\\_%' "
		  . "AND status = 'running' AND worker_pid IS NOT NULL",
		't', "round $round: every stream runs again after the restart");
}
$node->safe_psql('postgres', "SELECT streaming.process_available('$_', '120s')") for @streams;

my $file = abs_path(PostgreSQL::Test::Utils::tempdir()) . '/lines.json';
open my $fh, '>', $file or die "$file: $!";
print $fh map { "$_\n" } @lines;
close $fh or die "$file: $!";
$node->safe_psql(
	'postgres', qq{
CREATE TABLE exp_lines (line text);
COPY exp_lines FROM '$file';
CREATE TABLE exp_in (g text, n int, v int, ts timestamptz);
INSERT INTO exp_in SELECT r.* FROM exp_lines l, json_populate_record(NULL::exp_in, l.line::json) r;
CREATE VIEW exp_nl_update AS SELECT g, n, count(*) AS c, sum(v) AS total FROM exp_in GROUP BY g, n;
CREATE VIEW exp_nl_window AS
SELECT date_bin('1 minute', ts, 'epoch') AS ws, g, count(*) AS c, sum(v) AS total FROM exp_in GROUP BY 1, 2;
CREATE VIEW exp_nl_complete AS SELECT n, count(*) AS c, sum(v) AS total FROM exp_in GROUP BY n;
CREATE VIEW exp_nl_session AS
WITH marked AS (
    SELECT g, v, ts, CASE WHEN ts <= lag(ts) OVER w + interval '4 seconds' THEN 0 ELSE 1 END AS starts
    FROM exp_in WINDOW w AS (PARTITION BY g ORDER BY ts)),
numbered AS (
    SELECT g, v, ts, sum(starts) OVER (PARTITION BY g ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session
    FROM marked)
SELECT min(ts) AS ws, max(ts) + interval '4 seconds' AS we, g, count(*) AS c, sum(v) AS total
FROM numbered GROUP BY g, session;
});
my $all = scalar @lines;
for my $s (@streams)
{
	my $n = $node->safe_psql('postgres', "SELECT count(*) FROM exp_$s");
	is( $node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM (TABLE $s EXCEPT ALL TABLE exp_$s) d), "
			  . "(SELECT count(*) FROM (TABLE exp_$s EXCEPT ALL TABLE $s) d), "
			  . "(SELECT count(*) FROM $s), (SELECT sum(c) FROM $s)"),
		"0|0|$n|$all",
		"$s: the sink equals a plain GROUP BY over every record ($n rows)");
	ok( $node->safe_psql('postgres', "SELECT count(*) FROM $s WHERE NOT ($s IS NOT NULL)") > 0,
		"$s: NULL groups are in the sink");
	check_progress($node, $s, $all, $s);
}
my $recoveries = () = slurp_file($node->logfile) =~ /database system was interrupted/g;
ok($recoveries >= $rounds, "the server recovered after every immediate stop ($recoveries)");

$node->stop;
done_testing();
