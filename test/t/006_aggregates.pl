# 006_aggregates.pl: exactly-once of aggregate state under crashes (SPEC 6,
# 3.1, 3.2): state and watermark survive kill -9 and immediate restarts.
#
# Four aggregate streams read the same topic through one source capped at
# 3,000 records per batch, each run by its worker:
#   agg_update    update mode, 5-minute tumbling windows by status, with
#                 count, sum and avg (no watermark: state is never evicted);
#   agg_complete  complete mode, no window: count and sum by status;
#   agg_append    append mode, 5-minute tumbling windows by status, watermark
#                 3 hours: a window's row is written once, when it closes;
#   agg_session   update mode, 10-second session windows by status and
#                 amount >= 500 (sessions of a few seconds to minutes; the
#                 old records at the end merge sessions, whose rows must go).
# Order i has event time 2024-05-01 12:00 UTC + i seconds (StreamingTest),
# so 60,000 orders span 16.7 hours: 200 windows, 4 statuses each.
#
# 12,000 orders are there when the streams start; each of 8 crash rounds
# produces 6,000 more while the streams are held before their next batch
# (a session holds their catalog rows FOR UPDATE, which a batch locks
# first), lets them go, and at a random moment within the next 40 ms, while
# they work through that backlog, kills the worker of a random stream with
# SIGKILL (the postmaster then restarts everything) or stops the server with
# "immediate"; then it waits until every stream runs again and made
# progress.  Then every stream processes all that is available, the server
# is stopped "immediate" once more, and records with old event times
# arrive: most fall in windows that the watermark closed (agg_append must
# drop them, count them as late, and not write those windows again), one is
# older than the watermark but in a window that is still open (it counts),
# and all of them count in agg_update and agg_complete.  At the end every
# sink must equal a plain GROUP BY over every produced record (EXCEPT ALL
# both ways, and row counts), computed from a table filled with the very
# same JSON lines; streaming.progress must show consecutive batches that
# read every record once, the state sizes, the late rows, and a watermark
# that is, after every batch, the maximum event time seen so far minus the
# delay.
#
# Why the watermark delay is 3 hours, not 0: a batch that sees the new
# records of some partitions only (they are produced one partition after
# the other) reads the partitions unevenly, by up to one production chunk
# (6,000 records: 6,000 seconds of event time), and with a small delay the
# records of the lagging partitions would be late, in numbers that depend
# on timing.  Holding the streams while producing avoids that, but the
# result must not depend on it: with 3 hours > 6,000 s + one window no
# record of the main phase can be late, and the test is exact.
#
# STREAMING_TEST_SEED=N replays the random choices (timing aside).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use List::Util qw(shuffle);
use POSIX qw(strftime);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = test_seed();
my @streams = qw(agg_update agg_complete agg_append agg_session);
my $rounds = 8;
my @kinds = shuffle(('kill_worker') x ($rounds / 2), ('immediate') x ($rounds / 2));
my @victims = map { $streams[ int(rand(scalar @streams)) ] } 1 .. $rounds;
note "crash plan: "
  . join(', ',
	map { $kinds[$_] eq 'kill_worker' ? "kill $victims[$_]" : 'immediate' }
	  0 .. $rounds - 1);

my ($initial, $chunk, $total) = (12_000, 6_000, 60_000);
my $delay_s = 3 * 3600;    # the watermark delay of agg_append
# event time of order i: $epoch0 + i seconds (StreamingTest::Orders::line)
my $epoch0 = 1_714_564_800;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_006', 8);
my $orders = StreamingTest::Orders->new;
my ($first_line) = $orders->line(1);
die "unexpected event time of order 1: $first_line\n"
  unless $first_line =~ /"event_time": "2024-05-01T12:00:01Z"/;
$kafka->produce_orders($topic, $orders, $initial);

my $node = streaming_node('main');
create_orders_source($node, 'orders_src', $kafka, $topic,
	max_offsets_per_trigger => 3_000);
$node->safe_psql(
	'postgres', qq{
SELECT streaming.create_stream('agg_update',
    \$\$SELECT streaming.window_start() AS ws, status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean
      FROM orders_src GROUP BY streaming.tumble(event_time, '5 minutes'), status\$\$,
    output_mode => 'update');
SELECT streaming.create_stream('agg_complete',
    'SELECT status, count(*) AS n, sum(amount) AS total FROM orders_src GROUP BY status',
    output_mode => 'complete');
SELECT streaming.create_stream('agg_append',
    \$\$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status, count(*) AS n, sum(amount) AS total
      FROM orders_src GROUP BY streaming.tumble(event_time, '5 minutes'), status\$\$,
    output_mode => 'append', watermark => '$delay_s seconds');
SELECT streaming.create_stream('agg_session',
    \$\$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status, amount >= 500 AS big,
             count(*) AS n, sum(amount) AS total
      FROM orders_src GROUP BY streaming.session(event_time, '10 seconds'), status, amount >= 500\$\$,
    output_mode => 'update');
});

# records read by each stream's committed batches
my $processed_sql =
    "SELECT s.name, coalesce(sum(p.num_input_rows), 0) FROM streaming.streams s "
  . "LEFT JOIN streaming.progress p ON p.stream = s.name "
  . "WHERE s.name LIKE 'agg\\_%' GROUP BY s.name";

sub processed
{
	my ($out) = @_;
	$out = query_retry($node, $processed_sql) unless defined $out;
	my %n = map { split /\|/ } split /\n/, $out;
	return \%n;
}

sub fmt_processed
{
	my ($p) = @_;
	return join ', ', map { "$_ $p->{$_}" } @streams;
}

# pause(): hold the streams' catalog rows, as a batch does first thing
# (src/README.md, offset protocol): the workers wait before they plan their
# next batch.  Returns what resume() takes.
sub pause
{
	my $psql = $node->background_psql('postgres');
	$psql->query_safe('BEGIN');
	$psql->query_safe(
		"SELECT count(*) FROM (SELECT FROM streaming.stream_defs WHERE name LIKE 'agg\\_%' FOR UPDATE) s");
	return $psql;
}

sub resume
{
	my ($psql) = @_;
	$psql->query_safe('COMMIT');
	return;
}

my ($kills, $with_backlog) = (0, 0);
for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];
	my ($pid, $victim) = ('', '');

	if ($kind eq 'kill_worker')
	{
		$victim = $victims[ $round - 1 ];
		wait_for($node,
			"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = '$victim'",
			't', "round $round: $victim has a worker", $victim);
		$pid = stream_row($node, $victim)->{worker_pid};
	}

	# new orders, all of them there before any stream plans its next batch,
	# so that there is a backlog when the crash strikes
	my $pause = pause();
	$kafka->produce_orders($topic, $orders, $chunk);
	my $produced = $orders->count;
	resume($pause);

	# strike at a random moment while the streams work through it (what
	# they have done is asked in the open session: no new connection)
	usleep(int(rand(40_000)));
	my $at = processed($pause->query_safe($processed_sql));
	my $waiting = grep { $at->{$_} < $produced } @streams;
	$with_backlog++ if $waiting;
	if ($kind eq 'kill_worker')
	{
		note "round $round: kill -9 of the worker $pid of $victim; of $produced orders: "
		  . fmt_processed($at);
		ok(kill('KILL', $pid), "round $round: killed worker $pid of $victim");
		$kills++;
	}
	else
	{
		note "round $round: immediate stop; of $produced orders: " . fmt_processed($at);
		$node->stop('immediate');
		$node->start;
	}

	$pause->quit;

	# every stream runs again and makes progress (or has caught up)
	my $after = processed();
	my $cond = join ' AND ',
	  map { "coalesce((SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = '$_'), 0) "
		  . "> least($after->{$_}, $produced - 1)" } @streams;
	wait_for($node, "SELECT $cond", 't',
		"round $round ($kind): every stream makes progress after the crash ("
		  . fmt_processed($after) . ")");
	my $new_worker = $pid eq '' ? '' : " AND (name <> '$victim' OR worker_pid <> $pid)";
	wait_for($node,
		"SELECT count(*) = " . scalar(@streams) . " FROM streaming.streams WHERE name LIKE 'agg\\_%' "
		  . "AND status = 'running' AND worker_pid IS NOT NULL$new_worker",
		't', "round $round: every stream runs again, in a new worker");
}
is($orders->count, $total, "$total orders were produced");
note "$with_backlog of $rounds crashes struck while records were waiting";
ok($with_backlog >= 1, 'the crashes struck while streams had work to do');

for my $s (@streams)
{
	$node->safe_psql('postgres', "SELECT streaming.process_available('$s', '120s')");
}
is(fmt_processed(processed()), join(', ', map { "$_ $total" } @streams),
	'every stream read every order');

# the watermark: the last event time (order $total) minus the delay
my $wm_epoch = $epoch0 + $total - $delay_s;
my $wm_text = strftime('%Y-%m-%d %H:%M:%S+00', gmtime($wm_epoch));
my $wm_sql = "SELECT to_char(watermark AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || '+00' "
  . "FROM streaming.streams WHERE name = 'agg_append'";
is($node->safe_psql('postgres', $wm_sql),
	$wm_text, 'the watermark is the maximum event time minus the delay');

# The state and the watermark must survive one more crash: then records
# with old event times arrive.
$node->stop('immediate');
$node->start;
wait_for($node,
	"SELECT count(*) = " . scalar(@streams) . " FROM streaming.streams WHERE name LIKE 'agg\\_%' "
	  . "AND status = 'running' AND worker_pid IS NOT NULL",
	't', 'after the last restart every stream runs again');
is($node->safe_psql('postgres', $wm_sql),
	$wm_text, 'the watermark survived the restart');

# late records: one in each of the first 14 windows (each its own window and
# status group: late rows are counted per group), one in the window that
# ends at the watermark (closed), and one at the watermark itself (older
# than the watermark, but its window [watermark, watermark + 5 min) is
# open: it counts)
my @late;
my @statuses = qw(created paid shipped cancelled);
my @late_times = ((map { $epoch0 + 300 * $_ + 7 } 0 .. 13), $wm_epoch - 1, $wm_epoch);
for my $k (0 .. $#late_times)
{
	push @late,
	  sprintf('{"order_id": %d, "amount": %d.%02d, "status": "%s", "event_time": "%s"}',
		1_000_001 + $k, 10 + $k, (17 * $k) % 100, $statuses[ $k % 4 ],
		strftime('%Y-%m-%dT%H:%M:%SZ', gmtime($late_times[$k])));
}
$kafka->produce_lines($topic, \@late);
my $all = $total + scalar @late;
for my $s (@streams)
{
	$node->safe_psql('postgres', "SELECT streaming.process_available('$s', '120s')");
}
is($node->safe_psql('postgres', $wm_sql),
	$wm_text, 'old records do not move the watermark');

#
# The expected results: a plain GROUP BY over the same JSON lines
#
orders_table($node, 'exp_orders',
	[ (map { ($orders->line($_))[0] } 1 .. $orders->count), @late ]);
$node->safe_psql(
	'postgres', qq{
CREATE VIEW exp_update AS
SELECT date_bin('5 minutes', event_time, 'epoch') AS ws, status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean
FROM exp_orders GROUP BY 1, 2;
CREATE VIEW exp_complete AS
SELECT status, count(*) AS n, sum(amount) AS total FROM exp_orders GROUP BY 1;
-- agg_append: the late records are those (after order $total) in windows
-- closed by the watermark; its sink holds the closed windows, its state
-- the open ones
CREATE VIEW exp_append_groups AS
SELECT date_bin('5 minutes', event_time, 'epoch') AS ws,
       date_bin('5 minutes', event_time, 'epoch') + interval '5 minutes' AS we,
       status, count(*) AS n, sum(amount) AS total
FROM exp_orders
WHERE NOT (order_id > $total AND date_bin('5 minutes', event_time, 'epoch') + interval '5 minutes' <= '$wm_text')
GROUP BY 1, 2, 3;
CREATE VIEW exp_append AS SELECT * FROM exp_append_groups WHERE we <= '$wm_text';
-- agg_session: per status and big, a record more than 10 s after the one
-- before starts a session
CREATE VIEW exp_session AS
WITH marked AS (
    SELECT status, amount >= 500 AS big, amount, event_time,
           CASE WHEN event_time <= lag(event_time) OVER w + interval '10 seconds' THEN 0 ELSE 1 END AS starts
    FROM exp_orders WINDOW w AS (PARTITION BY status, amount >= 500 ORDER BY event_time)),
numbered AS (
    SELECT *, sum(starts) OVER (PARTITION BY status, big ORDER BY event_time ROWS UNBOUNDED PRECEDING) AS session
    FROM marked)
SELECT min(event_time) AS ws, max(event_time) + interval '10 seconds' AS we, status, big,
       count(*) AS n, sum(amount) AS total
FROM numbered GROUP BY status, big, session;
});
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT order_id) FROM exp_orders'),
	"$all|$all", 'the expected results are computed from every produced record');
my $num_late = $node->safe_psql('postgres',
	"SELECT count(*) FROM exp_orders WHERE order_id > $total "
	  . "AND date_bin('5 minutes', event_time, 'epoch') + interval '5 minutes' <= '$wm_text'");
is($num_late, scalar(@late) - 1, 'all but one of the old records are late for agg_append');

# compare(SINK, EXPECTED, COLUMNS, WHAT): same rows, as multisets
sub compare
{
	my ($sink, $expected, $cols, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return compare_rows($node, $sink, $expected, $cols,
		"$what: the sink equals a plain GROUP BY over every record");
}

my $n_update = compare('agg_update', 'exp_update', 'ws, status, n, total, mean', 'update mode');
my $n_complete = compare('agg_complete', 'exp_complete', 'status, n, total', 'complete mode');
my $n_append = compare('agg_append', 'exp_append', 'ws, we, status, n, total', 'append mode');
my $n_session = compare('agg_session', 'exp_session', 'ws, we, status, big, n, total',
	'session windows, update mode');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM agg_session'),
	$all, 'session windows: every record counted once');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT ws, status FROM agg_append GROUP BY 1, 2 HAVING count(*) > 1) d"),
	'0', 'append mode: no window and status is in the sink twice');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM agg_update'),
	$all, 'update mode: every record counted once');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM agg_complete'),
	$all, 'complete mode: every record counted once');

# streaming.progress: consecutive batches that read every record once, the
# state sizes, late rows, and the watermark
for my $s (@streams)
{
	check_progress($node, $s, $all, $s);
	my $row = stream_row($node, $s);
	is($row->{status}, 'running', "$s is still running");
	is($row->{lag}, '0', "$s has no lag");
}
ok( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.progress WHERE stream = 'agg_update' AND num_input_rows > 0") >=
	  int($total / 3_000),
	'many small batches (max_offsets_per_trigger)');

sub last_batch
{
	my ($s, $col) = @_;
	return $node->safe_psql('postgres',
		"SELECT $col FROM streaming.progress WHERE stream = '$s' ORDER BY batch_id DESC LIMIT 1");
}
is(last_batch('agg_update', 'num_state_rows'), $n_update,
	'update mode without a watermark: the state holds every group');
is(last_batch('agg_complete', 'num_state_rows'), $n_complete,
	'complete mode: the state holds every group');
is(last_batch('agg_session', 'num_state_rows'), $n_session,
	'session windows without a watermark: the state holds every session');
my $open = $node->safe_psql('postgres',
	"SELECT count(*) FROM exp_append_groups WHERE we > '$wm_text'");
is(last_batch('agg_append', 'num_state_rows'), $open,
	"append mode: the state holds the groups of the open windows ($open)");
is( $node->safe_psql('postgres',
		"SELECT stream, sum(num_late_rows) FROM streaming.progress WHERE stream LIKE 'agg\\_%' "
		  . "GROUP BY 1 ORDER BY 1"),
	"agg_append|$num_late\nagg_complete|0\nagg_session|0\nagg_update|0",
	'late rows: only the old records in closed windows, and only in agg_append');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT watermark, greatest(timestamptz '1970-01-01 00:00:00+00', "
		  . "max(max_event_time) OVER (ORDER BY batch_id) - interval '$delay_s seconds') AS expected "
		  . "FROM streaming.progress WHERE stream = 'agg_append') b "
		  . "WHERE watermark IS DISTINCT FROM expected"),
	'0',
	'append mode: after every batch, the watermark is the maximum event time so far minus the delay'
);
ok( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.progress WHERE stream = 'agg_append' AND num_input_rows = 0") > 0,
	'append mode: no-data batches ran after batches that moved the watermark');

# the crashes really were crashes: the postmaster restarted everything
my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /terminated by signal 9: Killed/g;
is($signal_9, $kills, 'the postmaster saw every killed worker');
my $recoveries = () = $log =~ /automatic recovery in progress/g;
ok($recoveries >= $rounds + 1, "the server recovered after every crash ($recoveries)");

$node->stop;
done_testing();
