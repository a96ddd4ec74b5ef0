# 026_auto_helpers.pl: automatic parallel helpers (parallel_workers NULL,
# streaming.max_parallel_workers_per_stream at its default, 2) on a server
# with few background worker slots (src/runtime.c).
#
# max_worker_processes = 4: PostgreSQL's logical replication launcher, the
# streaming launcher, a stream's worker and one more.  The first stream,
# on a 4-partition topic, wants two helpers and gets the one slot left.
# A second stream then finds no slot for its worker: the launcher asks
# automatic helpers to give theirs back, and the second stream's worker
# starts.  Both then run without helpers (no slot is free: the log says
# so), never waiting, and each sink holds every order once.  A stream on a
# 1-partition topic gets no helper (one could not be kept busier than the
# worker).  alter_stream(reset => ...) gives a stream with a number back
# to automatic.  Every wait is for a condition (sinks, logs), never a
# fixed sleep.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $kafka = StreamingTest::Kafka->start;
my ($topic) = $kafka->create_topic('orders_026', 4);
my ($topic1) = $kafka->create_topic('orders_026_one', 1);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 3_000);

my $node = streaming_node('main', conf => "max_worker_processes = 4\n");
is($node->safe_psql('postgres', 'SHOW streaming.max_parallel_workers_per_stream'),
	'2', 'automatic streams take up to two helpers by default');
create_orders_source($node, 'src4', $kafka, $topic, max_offsets_per_trigger => 500);

sub helpers
{
	my ($stream) = @_;
	return query_retry($node,
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streaming helper' "
		  . "AND application_name LIKE '% of stream ' || "
		  . "(SELECT id FROM streaming.stream_defs WHERE name = '$stream')");
}

# one slot left for helpers: the first stream runs with one of its two
create_orders_stream($node, 'auto_a', 'src4', start => 'true');
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_a', '120s')");
check_sink($node, 'auto_a', $orders, 'one of two automatic helpers');
check_progress($node, 'auto_a', $orders->count, 'one of two automatic helpers');
is(helpers('auto_a'), '1', 'the first stream got the one free slot for a helper');
ok($node->log_contains(qr/stream "auto_a" started 1 of its 2 parallel helpers/),
	'the log says it started one of two');

# a second stream's worker finds no slot: the first stream's helper gives
# its slot back, the worker starts, and it runs alone (no slot is free)
create_orders_stream($node, 'auto_b', 'src4', start => 'true');
wait_for($node,
	"SELECT status = 'running' AND worker_pid IS NOT NULL FROM streaming.streams WHERE name = 'auto_b'",
	't', "the second stream's worker started", 'auto_b');
$kafka->produce_orders($topic, $orders, 2_000);
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_a', '120s')");
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_b', '120s')");
check_sink($node, 'auto_a', $orders, 'after giving its helper back');
check_sink($node, 'auto_b', $orders, 'a stream that found no slot for helpers');
check_progress($node, 'auto_b', $orders->count, 'a stream that found no slot for helpers');
is(helpers('auto_a') + helpers('auto_b'), 0, 'neither stream has a helper now');
# once the helpers' time of giving way is over, they try again and find no slot
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
$kafka->produce_orders($topic, $orders, 400);
until ($node->log_contains(qr/stream "auto_b" runs without parallel helpers for now/)
	  || time() > $deadline)
{
	$kafka->produce_orders($topic, $orders, 4);
	usleep(200_000);
}
ok($node->log_contains(qr/stream "auto_b" runs without parallel helpers for now/),
	'the log says the second stream runs without helpers');
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_a', '120s')");
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_b', '120s')");
check_sink($node, 'auto_a', $orders, 'with no slot for helpers');
check_sink($node, 'auto_b', $orders, 'with no slot for helpers');
is( $node->safe_psql('postgres',
		"SELECT string_agg(status || ':' || coalesce(last_error, ''), ',' ORDER BY name) "
		  . "FROM streaming.streams WHERE name LIKE 'auto\\_%'"),
	'running:,running:', 'both streams run, without an error');
ok(!$node->log_contains(qr/could not start any of its/),
	'no stream waited for helpers (53000)');

# a 1-partition topic: no helper, though slots are free now
$node->safe_psql('postgres', "SELECT streaming.stop('auto_a'); SELECT streaming.stop('auto_b')");
wait_for($node,
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('streaming worker', 'streaming helper')",
	'0', 'the streams stopped');
my $orders1 = StreamingTest::Orders->new;
$kafka->produce_orders($topic1, $orders1, 1_000);
create_orders_source($node, 'src1', $kafka, $topic1, max_offsets_per_trigger => 200);
create_orders_stream($node, 'one_part', 'src1', start => 'true');
$node->safe_psql('postgres', "SELECT streaming.process_available('one_part', '120s')");
check_sink($node, 'one_part', $orders1, 'a 1-partition topic');
is(helpers('one_part'), '0', 'a stream of a 1-partition topic has no helper');

# a number of its own, then back to automatic with reset
$node->safe_psql('postgres', "SELECT streaming.stop('one_part')");
$node->safe_psql('postgres',
	"SELECT streaming.alter_stream('auto_a', parallel_workers => 1); SELECT streaming.start('auto_a')");
$kafka->produce_orders($topic, $orders, 1_000);
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_a', '120s')");
is(helpers('auto_a'), '1', 'parallel_workers => 1: one helper');
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres',
	"SELECT streaming.alter_stream('auto_a', reset => ARRAY['parallel_workers'])");
is( $node->safe_psql('postgres',
		"SELECT parallel_workers IS NULL FROM streaming.stream_defs WHERE name = 'auto_a'"),
	't', 'reset: parallel_workers is automatic (NULL) again');
$kafka->produce_orders($topic, $orders, 1_000);
$deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
usleep(100_000)
  until $node->log_contains(qr/stream "auto_a" started 1 of its 2 parallel helpers/, $log_offset)
  || time() > $deadline;
ok($node->log_contains(qr/stream "auto_a" started 1 of its 2 parallel helpers/, $log_offset),
	'automatic again: two helpers asked for, one started (one slot is free)');
$node->safe_psql('postgres', "SELECT streaming.process_available('auto_a', '120s')");
check_sink($node, 'auto_a', $orders, 'back to automatic');
check_progress($node, 'auto_a', $orders->count, 'back to automatic');

# streaming.helper_cpus: at most one automatic helper per CPU, none on one
# CPU (helpers would only add their hand-over); a stream's own number is not
# bounded by it
sub until_helpers
{
	my ($count, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until (helpers('auto_a') eq $count || time() > $deadline)
	{
		$kafka->produce_orders($topic, $orders, 4);
		usleep(100_000);
	}
	$node->safe_psql('postgres', "SELECT streaming.process_available('auto_a', '120s')");
	# (the waits run a batch per few records: more than progress_history keeps)
	check_sink($node, 'auto_a', $orders, $what);
}
$node->safe_psql('postgres',
	"ALTER SYSTEM SET streaming.helper_cpus = 1; SELECT pg_reload_conf()");
until_helpers('0', 'streaming.helper_cpus = 1');
is(helpers('auto_a'), '0', 'streaming.helper_cpus = 1: an automatic stream has no helper');
$log_offset = -s $node->logfile;
$node->safe_psql('postgres',
	"ALTER SYSTEM SET streaming.helper_cpus = 2; SELECT pg_reload_conf()");
until_helpers('1', 'streaming.helper_cpus = 2');
is(helpers('auto_a'), '1', 'streaming.helper_cpus = 2: helpers again (one slot is free)');
ok($node->log_contains(qr/stream "auto_a" started 1 of its 2 parallel helpers/, $log_offset),
	'streaming.helper_cpus = 2: two helpers asked for, one started');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET streaming.helper_cpus = 1; SELECT pg_reload_conf()");
$node->safe_psql('postgres', "SELECT streaming.stop('auto_a')");
$node->safe_psql('postgres',
	"SELECT streaming.alter_stream('auto_a', parallel_workers => 1); SELECT streaming.start('auto_a')");
until_helpers('1', 'a number of its own on one CPU');
is(helpers('auto_a'), '1', 'parallel_workers => 1 is not bounded by streaming.helper_cpus');

$node->stop;
done_testing();
