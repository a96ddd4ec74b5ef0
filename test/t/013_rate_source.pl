# 013_rate_source.pl: a rate stream across immediate restarts, pg_dump and
# reset (SPEC 2.3, 6).
#
# A worker runs a stateless stream over a rate source of 2,000 rows per
# second in 4 partitions (value v at the stream's start + v * 500
# microseconds) while the server is stopped in immediate mode and started
# again, at random moments (seeded), some of them in the middle of the
# catch-up batch that follows a restart.  Afterwards the sink holds every
# value from 0 to the last committed one exactly once, each in partition
# v % 4 and at its timestamp; the start time never moved; every batch began
# where the one before it ended and took exactly the values due when it
# started (none after); the stored offsets count each partition's rows.
#
# pg_dump keeps the positions and the start time: a restored database goes
# on from where the dump left it, on the same schedule.  reset forgets both:
# started again, the stream begins at value 0 at a new start time, and its
# rows relative to that start are those of the first run.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = test_seed();
my $rounds = 5;
my $rate = 2000;
my $nparts = 4;
my $us_per_value = 1_000_000 / $rate;

my $node = streaming_node('main', conf => "streaming.progress_history = 100000\n");
$node->safe_psql(
	'postgres', qq{
SELECT streaming.create_rate_source('rate_src', $rate, num_partitions => $nparts);
SELECT streaming.create_stream('rate_all',
    'SELECT value, partition, "timestamp" AS ts FROM rate_src', trigger => '20 milliseconds');
});

my $start_sql =
  "SELECT source_started_at FROM streaming.stream_defs WHERE name = 'rate_all'";
wait_for($node, "SELECT ($start_sql) IS NOT NULL", 't',
	'the first batch recorded the start time', 'rate_all');
my $start = $node->safe_psql('postgres', $start_sql);
note "the stream started at $start";

# check_rate(DB, WHAT): the sink of rate_all in DB against the schedule
# from the stream's start, its batches and its stored offsets; returns the
# number of rows.
sub check_rate
{
	my ($db, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $s = "($start_sql)";
	my $step = "interval '$us_per_value microseconds'";

	my ($n, $max) = split /\|/,
	  $node->safe_psql($db, 'SELECT count(*), max(value) FROM rate_all');
	ok($n > 0, "$what: the sink has rows ($n)");
	is( $node->safe_psql($db,
			'SELECT min(value), count(DISTINCT value) FROM rate_all'),
		"0|$n", "$what: values 0 to $max, each once (no gap, no repeat)");
	is($max, $n - 1, "$what: the largest value is the number of rows - 1");
	is( $node->safe_psql($db,
			"SELECT count(*) FROM rate_all WHERE partition <> value % $nparts"),
		'0', "$what: value v is in partition v % $nparts");
	is( $node->safe_psql($db,
			"SELECT count(*) FROM rate_all WHERE ts <> $s + value * $step"),
		'0', "$what: value v is at the start + v * $us_per_value microseconds");

	# batches: consecutive, each one took every value due at its start and
	# none after it
	my $batches = qq{
		SELECT batch_id, started_at, num_input_rows,
		       lag(batch_id) OVER w AS prev_id, lag(end_positions) OVER w AS prev_end,
		       start_positions, end_positions,
		       (SELECT sum(o.off::bigint) FROM jsonb_each(end_positions) t(topic, parts),
		               jsonb_each_text(t.parts) o(part, off)) AS next
		FROM streaming.progress WHERE stream = 'rate_all'
		WINDOW w AS (ORDER BY batch_id)};
	is( $node->safe_psql($db,
			"SELECT min(batch_id), sum(num_input_rows) FROM ($batches) b"),
		"0|$n", "$what: the batches read every row once, from batch 0 on");
	is( $node->safe_psql($db,
			"SELECT count(*) FROM ($batches) b WHERE prev_id IS NOT NULL "
			  . "AND (prev_id <> batch_id - 1 OR start_positions IS DISTINCT FROM prev_end)"),
		'0', "$what: each batch starts where the previous one ended");
	is( $node->safe_psql($db,
			"SELECT count(*) FROM ($batches) b WHERE "
			  . "$s + (next - 1) * $step > started_at OR $s + next * $step <= started_at"),
		'0',
		"$what: each batch took exactly the values due when it started (never ahead of the clock)"
	);

	is( $node->safe_psql($db,
			"SELECT string_agg(format('%s=%s', l.partition, l.committed_offset), ',' ORDER BY l.partition) "
			  . "FROM streaming.source_lag l WHERE l.stream = 'rate_all'"),
		join(',',
			map { "$_=" . ($n > $_ ? int(($n - $_ - 1) / $nparts) + 1 : 0) }
			  0 .. $nparts - 1),
		"$what: the stored offsets count each partition's rows");
	return $n;
}

# immediate restarts at random moments
my $log_offset = -s $node->logfile;
for my $round (1 .. $rounds)
{
	my $delay = int(rand(1_200_000));
	usleep($delay);
	my $before = query_retry($node, 'SELECT count(*) FROM rate_all');
	note "round $round: immediate stop after " . int($delay / 1000) . " ms, at $before rows";
	$node->stop('immediate');
	$node->start;
	wait_for($node, "SELECT count(*) > $before FROM rate_all",
		't', "round $round: the stream goes on after the restart", 'rate_all');
}
$node->safe_psql('postgres', "SELECT streaming.stop('rate_all')");
my $log = slurp_file($node->logfile, $log_offset);
my $immediate = () = $log =~ /received immediate shutdown request/g;
is($immediate, $rounds, "the server was stopped in immediate mode $rounds times");

is($node->safe_psql('postgres', $start_sql), $start, 'the start time never moved');
my $rows = check_rate('postgres', 'after the restarts');
ok( $rows >= $rate,
	"the stream ran for more than a second of values ($rows)");

# pg_dump keeps the positions and the start time
my $dump = $node->basedir . '/rate.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with a rate stream');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('restored'),
		'-f', $dump ],
	'the dump restores');
is($node->safe_psql('restored', $start_sql), $start, 'the restored stream has the same start time');
$node->safe_psql('restored', "SELECT streaming.run_batch('rate_all')");
is( $node->safe_psql('restored',
		"SELECT min(value) FROM rate_all WHERE value >= $rows"),
	$rows, 'the restored stream goes on at the next value');
check_rate('restored', 'the restored stream');

# reset: the stream starts over at value 0, at a new start time
$node->safe_psql(
	'postgres', qq{
CREATE TABLE first_run AS SELECT value, partition, ts - ($start_sql) AS since FROM rate_all;
TRUNCATE rate_all;
SELECT streaming.reset('rate_all');
});
is($node->safe_psql('postgres', "SELECT ($start_sql) IS NULL"),
	't', 'reset forgets the start time');
$node->safe_psql('postgres', "SELECT streaming.start('rate_all')");
wait_for($node, "SELECT count(*) >= $rate FROM rate_all",
	't', 'the reset stream runs again', 'rate_all');
$node->safe_psql('postgres', "SELECT streaming.stop('rate_all')");
my $new_start = $node->safe_psql('postgres', $start_sql);
is($node->safe_psql('postgres', "SELECT '$new_start'::timestamptz > '$start'::timestamptz"),
	't', "a new start time ($new_start)");
$start = $new_start;
my $again = check_rate('postgres', 'after reset and start');
my $common = $again < $rows ? $again : $rows;
is( $node->safe_psql(
		'postgres', qq{
WITH new_run AS (SELECT value, partition, ts - ($start_sql) AS since FROM rate_all)
SELECT (SELECT count(*) FROM (SELECT * FROM first_run WHERE value < $common
                              EXCEPT ALL SELECT * FROM new_run WHERE value < $common) d),
       (SELECT count(*) FROM (SELECT * FROM new_run WHERE value < $common
                              EXCEPT ALL SELECT * FROM first_run WHERE value < $common) d)}),
	'0|0',
	"after reset, the first $common rows relative to the start are those of the first run");

$node->stop;
done_testing();
