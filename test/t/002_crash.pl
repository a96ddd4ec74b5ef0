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
# The test runs one such stream per parallel_workers value of
# parallel_workers_list (0 and 2 by default, STREAMING_TEST_PARALLEL_WORKERS
# chooses), side by side on the same topic: every crash strikes them all
# (a killed worker restarts every process), each kill_worker round kills
# the worker of one of them in turn, and each must end with every record
# exactly once.
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
my @streams = map { $_ ? "orders_eo_p$_" : 'orders_eo' } parallel_workers_list();
my %pw = map { ($_ ? "orders_eo_p$_" : 'orders_eo') => $_ } parallel_workers_list();
create_orders_stream($node, $_, 'orders_src', parallel_workers => $pw{$_}, start => 'true')
  for @streams;
my $names = join ', ', map { "'$_'" } @streams;

sub sink_rows
{
	my ($stream) = @_;
	return query_retry($node, "SELECT count(*) FROM $stream");
}

my ($kills, $with_backlog) = (0, 0);
for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];
	my $pid = '';
	my $victim = $streams[ $round % @streams ];

	if ($kind eq 'kill_worker')
	{
		wait_for($node,
			"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = '$victim'",
			't', "round $round: the stream has a worker", $victim);
		$pid = stream_row($node, $victim)->{worker_pid};
	}

	# a backlog of several batches, all there before the worker plans its
	# next batch (hold_streams)
	my $hold = hold_streams($node, "name IN ($names)");
	note "round $round: producing 25,000 more orders";
	$kafka->produce_orders($topic, $orders, 25_000);
	$hold->query_safe('COMMIT');

	# strike at a random moment while the stream works through it (what it
	# has done is asked in the session already open: new connections of a
	# loaded machine took longer than the stream needed for the backlog)
	usleep(int(rand(40_000)));
	my %before = map { $_ => $hold->query_safe("SELECT count(*) FROM $_") } @streams;
	my $before = join '/', map { $before{$_} } @streams;
	$with_backlog++ if grep { $before{$_} < $orders->count } @streams;

	if ($kind eq 'kill_worker')
	{
		note "round $round: kill -9 of worker $pid of $victim at $before of "
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
	# (the holding session went with the crash)
	eval { $hold->quit; 1 };

	# every stream runs again, in a new worker, and makes progress (or has
	# caught up)
	for my $stream (@streams)
	{
		my $after = sink_rows($stream);
		my $produced = $orders->count;
		wait_for($node,
			"SELECT count(*) > $after OR count(*) >= $produced FROM $stream", 't',
			"round $round ($kind): $stream makes progress after the crash ($after rows)",
			$stream);
		my $new_worker = $pid eq '' ? '' : " AND worker_pid <> $pid";
		wait_for($node,
			"SELECT status = 'running' AND worker_pid IS NOT NULL$new_worker "
			  . "FROM streaming.streams WHERE name = '$stream'",
			't', "round $round: $stream runs again, in a new worker", $stream);
	}
}

note "$with_backlog of $rounds crashes struck while records were waiting";
ok($with_backlog >= 1, 'the crashes struck while the stream had work to do');
for my $stream (@streams)
{
	my $what = "$stream (parallel_workers $pw{$stream}) after the crashes";
	$node->safe_psql('postgres',
		"SELECT streaming.process_available('$stream', '180s')");

	check_sink($node, $stream, $orders, $what);
	check_offsets($node, $stream, $kafka, $topic, $what);
	check_progress($node, $stream, $orders->count, $what);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM $stream GROUP BY order_id HAVING count(*) > 1"),
		'', "$what: no order is in the sink twice");
	my $row = stream_row($node, $stream);
	is($row->{status}, 'running', "$what: the stream is still running");
	is($row->{lag}, '0', "$what: the stream has no lag");
	ok( $node->safe_psql('postgres',
			"SELECT count(*) FROM streaming.progress WHERE stream = '$stream'") >=
		  int($orders->count / 5_000),
		"$what: the stream ran many small batches (max_offsets_per_trigger)");
}

# the crashes really were crashes: the postmaster restarted everything
my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /terminated by signal 9: Killed/g;
is($signal_9, $kills, 'the postmaster saw every killed worker');
my $recoveries = () = $log =~ /automatic recovery in progress/g;
ok($recoveries >= $rounds, "the server recovered after every crash ($recoveries)");

$node->stop;
done_testing();
