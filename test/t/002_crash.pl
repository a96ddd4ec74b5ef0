# 002_crash.pl: exactly-once under crashes (SPEC 6).
#
# A stream consumes 150,000+ orders in batches of at most 5,000 records
# while, at random moments, its worker is killed with SIGKILL (the
# postmaster then restarts every process) or the whole server is stopped
# with "immediate" and started again.  Every crash strikes a stream that
# still has a backlog (more records are produced whenever fewer than 25,000
# are waiting), at a random delay after it resumed from the previous crash.
# Between rounds the stream must make progress again.  At the end the sink
# holds every record exactly once (no loss, no duplicates, same sums and
# checksum), the stored offsets are the high watermarks, and the committed
# batches read every record once, each starting where the previous ended.
#
# The random choices (order of the crash kinds, delay before each one)
# come from the seed printed at the start; STREAMING_TEST_SEED=N replays
# them (timing aside).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use List::Util qw(shuffle);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = test_seed();
my $rounds = 8;
my @kinds = shuffle(('kill_worker') x ($rounds / 2), ('immediate') x ($rounds / 2));
note "crash plan: @kinds";

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_002', 16);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 150_000);

my $node = streaming_node('main');
create_orders_source($node, 'orders_src', $kafka, $topic,
	max_offsets_per_trigger => 2_000);
create_orders_stream($node, 'orders_eo', 'orders_src', start => 'true');

sub sink_rows
{
	return query_retry($node, 'SELECT count(*) FROM orders_eo');
}

my ($kills, $with_backlog) = (0, 0);
for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];

	# a backlog of several batches, all there before the worker plans its
	# next batch: hold the stream's catalog row, as a batch does first thing
	my $hold = $node->background_psql('postgres');
	$hold->query_safe('BEGIN');
	$hold->query_safe(
		"SELECT count(*) FROM (SELECT FROM streaming.stream_defs WHERE name = 'orders_eo' FOR UPDATE) s");
	note "round $round: producing 25,000 more orders";
	$kafka->produce_orders($topic, $orders, 25_000);
	$hold->query_safe('COMMIT');
	$hold->quit;

	# strike at a random moment while the stream works through it
	usleep(int(rand(40_000)));
	my $before = sink_rows();
	my $pid = '';
	$with_backlog++ if $before < $orders->count;

	if ($kind eq 'kill_worker')
	{
		$pid = stream_row($node, 'orders_eo')->{worker_pid};
		if ($pid eq '')
		{
			wait_for($node,
				"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = 'orders_eo'",
				't', "round $round: the stream has a worker", 'orders_eo');
			$pid = stream_row($node, 'orders_eo')->{worker_pid};
		}
		note "round $round: kill -9 of worker $pid at $before of "
		  . $orders->count . " rows";
		ok(kill('KILL', $pid), "round $round: killed worker $pid");
		$kills++;
	}
	else
	{
		note "round $round: immediate stop at $before of "
		  . $orders->count . " rows";
		$node->stop('immediate');
		$node->start;
	}

	# the stream runs again, in a new worker, and makes progress (or has
	# caught up)
	my $after = sink_rows();
	my $produced = $orders->count;
	wait_for($node,
		"SELECT count(*) > $after OR count(*) >= $produced FROM orders_eo", 't',
		"round $round ($kind): the stream makes progress after the crash ($after rows)",
		'orders_eo');
	my $new_worker = $pid eq '' ? '' : " AND worker_pid <> $pid";
	wait_for($node,
		"SELECT status = 'running' AND worker_pid IS NOT NULL$new_worker "
		  . "FROM streaming.streams WHERE name = 'orders_eo'",
		't', "round $round: the stream runs again, in a new worker", 'orders_eo');
}

note "$with_backlog of $rounds crashes struck while records were waiting";
ok($with_backlog >= 1, 'the crashes struck while the stream had work to do');
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_eo', '180s')");

check_sink($node, 'orders_eo', $orders, 'after the crashes');
check_offsets($node, 'orders_eo', $kafka, $topic, 'after the crashes');
check_progress($node, 'orders_eo', $orders->count, 'after the crashes');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM orders_eo GROUP BY order_id HAVING count(*) > 1"),
	'', 'no order is in the sink twice');
my $row = stream_row($node, 'orders_eo');
is($row->{status}, 'running', 'the stream is still running');
is($row->{lag}, '0', 'the stream has no lag');
ok( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.progress WHERE stream = 'orders_eo'") >=
	  int($orders->count / 5_000),
	'the stream ran many small batches (max_offsets_per_trigger)');

# the crashes really were crashes: the postmaster restarted everything
my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /terminated by signal 9: Killed/g;
is($signal_9, $kills, 'the postmaster saw every killed worker');
my $recoveries = () = $log =~ /automatic recovery in progress/g;
ok($recoveries >= $rounds, "the server recovered after every crash ($recoveries)");

$node->stop;
done_testing();
