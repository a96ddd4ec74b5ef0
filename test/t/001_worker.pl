# 001_worker.pl: streams run by background workers (SPEC 1, 3.4, 4, 5).
#
# A stream with the default trigger consumes 100,000 orders and a malformed
# record through its worker; the worker shows in streaming.streams and in
# pg_stat_activity; stop() ends it and start() resumes exactly where it
# stopped; the malformed record goes to streaming.dead_letters without
# stalling the stream; 'once' and 'available_now' streams finish;
# drop_stream() of a running stream ends its worker; run_batch() refuses a
# stream that a worker runs.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_001', 8);
my $orders = StreamingTest::Orders->new;

# 100,000 orders, with a malformed record in the middle
my $poison = $kafka->produce_orders($topic, $orders, 100_000,
	poison_at => [50_000]);
my ($poison_part, $poison_offset, $poison_raw) = @{ $poison->[0] };

my $node = streaming_node('main');
create_orders_source($node, 'orders_src', $kafka, $topic);

#
# A stream with the default trigger, started by create_stream
#
create_orders_stream($node, 'orders_all', 'orders_src', start => 'true');
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_all', '120s')");
check_sink($node, 'orders_all', $orders, 'first run');
check_offsets($node, 'orders_all', $kafka, $topic, 'first run');
check_progress($node, 'orders_all', $orders->count + 1, 'first run');

is( $node->safe_psql('postgres',
		"SELECT stream, source, position, convert_from(raw, 'UTF8'), error <> '', sqlstate <> '' "
		  . "FROM streaming.dead_letters"),
	"orders_all|orders_src|{\"topic\": \"$topic\", \"offset\": $poison_offset, \"partition\": $poison_part}|$poison_raw|t|t",
	'the malformed record is in dead_letters with its position, raw bytes and error');

my $row = stream_row($node, 'orders_all');
is($row->{status}, 'running', 'the stream is running');
like($row->{worker_pid}, qr/^\d+$/, 'the stream has a worker');
is($row->{lag}, '0', 'the stream has no lag');
is($row->{last_error}, '', 'the stream has no error');
my $pid = $row->{worker_pid};
is( $node->safe_psql('postgres',
		"SELECT backend_type FROM pg_stat_activity WHERE pid = $pid"),
	'streaming worker',
	'worker_pid is a streaming worker in pg_stat_activity');

# run_batch refuses a stream that a worker runs
like(
	psql_error($node, "SELECT streaming.run_batch('orders_all')"),
	qr/stream "orders_all" is being run by a background worker/,
	'run_batch on a running stream is refused');

#
# stop(): the worker finishes and is gone
#
$node->safe_psql('postgres', "SELECT streaming.stop('orders_all')");
$row = stream_row($node, 'orders_all');
is($row->{status}, 'stopped', 'after stop() the status is stopped');
is($row->{worker_pid}, '', 'after stop() the stream has no worker');
# stop() returns once the worker's slot is free, which the worker does
# first thing on its way out: its pg_stat_activity entry goes a little later
wait_for($node,
	"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid OR backend_type = 'streaming worker'",
	'0', 'after stop() the worker process is gone');

# records produced while stopped are consumed after start(), once
$kafka->produce_orders($topic, $orders, 10_000);
$node->safe_psql('postgres', "SELECT streaming.start('orders_all')");
wait_for($node,
	"SELECT status = 'running' AND worker_pid IS NOT NULL AND worker_pid <> $pid "
	  . "FROM streaming.streams WHERE name = 'orders_all'",
	't', 'start() starts a new worker', 'orders_all');
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_all', '120s')");
check_sink($node, 'orders_all', $orders, 'after stop() and start()');
check_offsets($node, 'orders_all', $kafka, $topic, 'after stop() and start()');
check_progress($node, 'orders_all', $orders->count + 1,
	'after stop() and start()');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streaming.dead_letters'),
	'1', 'the malformed record was set aside once');

#
# A poison record in the middle of a stream that is running: it does not
# stall the stream
#
$poison = $kafka->produce_orders($topic, $orders, 5_000,
	poison_at => [ 1_000, 2_500 ]);
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_all', '120s')");
check_sink($node, 'orders_all', $orders, 'after poison records while running');
check_offsets($node, 'orders_all', $kafka, $topic,
	'after poison records while running');
is( $node->safe_psql('postgres',
		"SELECT string_agg((position->>'partition') || ':' || (position->>'offset'), ',' ORDER BY id) "
		  . "FROM streaming.dead_letters WHERE stream = 'orders_all' AND id > 1"),
	join(',', map { "$_->[0]:$_->[1]" } @$poison),
	'both new malformed records are in dead_letters');
is(stream_row($node, 'orders_all')->{status},
	'running', 'the stream is still running');

#
# trigger 'once': one batch, then finished.  Its own source caps a batch at
# 10,000 records, so it cannot read everything in one batch.
#
create_orders_source($node, 'orders_capped', $kafka, $topic,
	max_offsets_per_trigger => 10_000);
create_orders_stream($node, 'orders_once', 'orders_capped',
	trigger => "'once'");
wait_for($node,
	"SELECT status FROM streaming.streams WHERE name = 'orders_once'",
	'finished', "the 'once' stream finishes", 'orders_once');
# its worker exits right after it commits the status
wait_for($node,
	"SELECT worker_pid IS NULL FROM streaming.streams WHERE name = 'orders_once'",
	't', "the finished 'once' stream has no worker", 'orders_once');
is( $node->safe_psql('postgres',
		"SELECT count(*), min(batch_id), max(batch_id) FROM streaming.progress WHERE stream = 'orders_once'"
	),
	'1|0|0',
	"the 'once' stream ran exactly one batch");
my ($once_rows, $once_input) = split /\|/,
  $node->safe_psql('postgres',
	"SELECT (SELECT count(*) FROM orders_once), "
	  . "(SELECT num_input_rows FROM streaming.progress WHERE stream = 'orders_once')");
ok($once_rows > 0 && $once_rows <= 10_000 && $once_rows == $once_input,
	"the 'once' batch wrote every record it read, at most max_offsets_per_trigger ($once_rows of $once_input)");
is( $node->safe_psql('postgres',
		"SELECT count(*) = count(DISTINCT (kafka_partition, kafka_offset)) FROM orders_once"),
	't', "the 'once' stream wrote each record once");

# a finished stream: run_batch() works on it, and start() runs it again
# from where it stopped
is($node->safe_psql('postgres', "SELECT streaming.run_batch('orders_once')"),
	'1', "run_batch on the finished 'once' stream runs batch 1");
$node->safe_psql('postgres', "SELECT streaming.start('orders_once')");
wait_for($node,
	"SELECT status = 'finished' AND worker_pid IS NULL AND last_batch_id = 2 "
	  . "FROM streaming.streams WHERE name = 'orders_once'",
	't', "start() runs the finished 'once' stream again: batch 2, then finished",
	'orders_once');
is( $node->safe_psql('postgres',
		"SELECT count(*) = count(DISTINCT (kafka_partition, kafka_offset)) "
		  . "AND count(*) = (SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = 'orders_once') "
		  . "FROM orders_once"),
	't', "the 'once' stream's three batches read different records");
check_progress($node, 'orders_once',
	$node->safe_psql('postgres', 'SELECT count(*) FROM orders_once'),
	"'once' run three times");

#
# trigger 'available_now': everything that is there, in capped batches,
# then finished
#
create_orders_stream($node, 'orders_now', 'orders_capped',
	trigger => "'available_now'");
wait_for($node,
	"SELECT status FROM streaming.streams WHERE name = 'orders_now'",
	'finished', "the 'available_now' stream finishes", 'orders_now');
# its worker exits right after it commits the status
wait_for($node,
	"SELECT worker_pid IS NULL FROM streaming.streams WHERE name = 'orders_now'",
	't', "the finished 'available_now' stream has no worker", 'orders_now');
check_sink($node, 'orders_now', $orders, "'available_now'");
check_offsets($node, 'orders_now', $kafka, $topic, "'available_now'");
check_progress($node, 'orders_now', $orders->count + 3, "'available_now'");
ok( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.progress WHERE stream = 'orders_now'") >=
	  int(($orders->count + 3) / 10_000),
	"the 'available_now' stream respected max_offsets_per_trigger");

#
# drop_stream() of a running stream stops its worker
#
create_orders_stream($node, 'orders_tmp', 'orders_src', start => 'true');
wait_for($node,
	"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = 'orders_tmp'",
	't', 'the stream to be dropped has a worker', 'orders_tmp');
my $tmp_pid = stream_row($node, 'orders_tmp')->{worker_pid};
$node->safe_psql('postgres', "SELECT streaming.drop_stream('orders_tmp', drop_sink => true)");
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.streams WHERE name = 'orders_tmp'"),
	'0', 'the dropped stream is gone');
# as after stop(): the slot is free before the process has gone
wait_for($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $tmp_pid",
	'0', 'the worker of the dropped stream is gone');
is($node->safe_psql('postgres', "SELECT to_regclass('orders_tmp') IS NULL"),
	't', 'drop_sink => true dropped the sink');

# the other stream is unaffected
is(stream_row($node, 'orders_all')->{status},
	'running', 'the first stream still runs');
check_sink($node, 'orders_all', $orders, 'at the end');

$node->stop;
done_testing();
