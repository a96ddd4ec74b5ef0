# 004_failures.pl: failed batches and a server without preloading
# (SPEC 1, 5, 6).
#
# A sink's CHECK constraint rejects one record: the batch is rolled back,
# retried streaming.max_retries times with backoff, then the stream is
# 'failed' with the constraint in last_error and nothing of the batch
# committed.  After the constraint is dropped, start() resumes the stream
# and every record arrives exactly once.
#
# Without shared_preload_libraries the extension still installs and
# run_batch() works (and is undone by the caller's ROLLBACK), while start()
# and create_stream(start => true) fail with an error that says to add
# streaming to shared_preload_libraries.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_004', 4);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 1_000);

my $node = streaming_node('main');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET streaming.max_retries = 2;\n"
	  . "ALTER SYSTEM SET streaming.retry_delay = '50ms';\n"
	  . "SELECT pg_reload_conf();");
wait_for($node,
	"SELECT current_setting('streaming.max_retries') || ' ' || current_setting('streaming.retry_delay')",
	'2 50ms', 'the new settings are loaded');

create_orders_source($node, 'orders_src', $kafka, $topic);
$node->safe_psql('postgres',
	'CREATE TABLE orders_chk (order_id bigint, amount numeric(12,2), status text, '
	  . 'event_time timestamptz, kafka_partition integer, kafka_offset bigint, '
	  . 'CONSTRAINT no_order_1500 CHECK (order_id <> 1500))');
create_orders_stream($node, 'orders_chk', 'orders_src', start => 'true');
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_chk', '60s')");
check_sink($node, 'orders_chk', $orders, 'before the failure');
my $batch_before = stream_row($node, 'orders_chk')->{last_batch_id};

#
# The next 1,000 records include order 1500, which the sink rejects.  They
# are produced while the stream is stopped, so that they all fall in its
# next batch.
#
$node->safe_psql('postgres', "SELECT streaming.stop('orders_chk')");
my $good_stats = $orders->expected_stats;
$kafka->produce_orders($topic, $orders, 1_000);
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT streaming.start('orders_chk')");
wait_for($node,
	"SELECT status FROM streaming.streams WHERE name = 'orders_chk'",
	'failed', 'the stream fails', 'orders_chk');

my $row = stream_row($node, 'orders_chk');
like($row->{last_error}, qr/no_order_1500/,
	'last_error names the violated constraint');
note "last_error: $row->{last_error}";
# its worker exits right after it commits the status
wait_for($node,
	"SELECT worker_pid IS NULL FROM streaming.streams WHERE name = 'orders_chk'",
	't', 'the failed stream has no worker', 'orders_chk');
is($row->{last_batch_id}, $batch_before, 'no batch was committed');
is(sink_stats($node, 'orders_chk'), $good_stats,
	'nothing of the failed batch is in the sink');
is( $node->safe_psql('postgres',
		"SELECT sum(p.position) FROM streaming.positions p JOIN streaming.stream_defs s "
		  . "ON s.id = p.stream_id WHERE s.name = 'orders_chk'"),
	'1000',
	'the positions did not move past the failed batch');
is( $node->safe_psql('postgres',
		"SELECT failures FROM streaming.stream_defs WHERE name = 'orders_chk'"),
	'3', 'the batch was tried once and retried streaming.max_retries (2) times');
my $log = substr(slurp_file($node->logfile), $log_offset);
my $attempts = () = $log =~
  /streaming worker ERROR:  new row for relation "orders_chk" violates check constraint "no_order_1500"/g;
is($attempts, 3, 'the server log shows three failed attempts');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streaming.dead_letters'),
	'0', 'a failed batch is not a bad record');
# worker_pid goes when the worker frees its slot, its pg_stat_activity
# entry a little later
wait_for($node,
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streaming worker'",
	'0', 'no worker runs');

#
# Fix the sink, start again: everything arrives, once
#
$node->safe_psql('postgres',
	'ALTER TABLE orders_chk DROP CONSTRAINT no_order_1500');
$node->safe_psql('postgres', "SELECT streaming.start('orders_chk')");
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_chk', '60s')");
check_sink($node, 'orders_chk', $orders, 'after the fix');
check_offsets($node, 'orders_chk', $kafka, $topic, 'after the fix');
check_progress($node, 'orders_chk', $orders->count, 'after the fix');
$row = stream_row($node, 'orders_chk');
is($row->{status}, 'running', 'the stream runs again');
is($row->{last_error}, '', 'last_error is cleared by a committed batch');
is( $node->safe_psql('postgres',
		"SELECT failures FROM streaming.stream_defs WHERE name = 'orders_chk'"),
	'0', 'the failure count is reset');
$node->stop;

#
# Without shared_preload_libraries
#
my $plain = streaming_node('plain', preload => 0);
is($plain->safe_psql('postgres', "SELECT extname FROM pg_extension WHERE extname = 'streaming'"),
	'streaming', 'CREATE EXTENSION works without shared_preload_libraries');
create_orders_source($plain, 'orders_src', $kafka, $topic);
create_orders_stream($plain, 'orders_manual', 'orders_src', start => 'false');
is(stream_row($plain, 'orders_manual')->{status},
	'stopped', 'create_stream(start => false) works');

is($plain->safe_psql('postgres', "SELECT streaming.run_batch('orders_manual')"),
	'0', 'run_batch runs the first batch');
check_sink($plain, 'orders_manual', $orders, 'run_batch');
is($plain->safe_psql('postgres', "SELECT streaming.run_batch('orders_manual') IS NULL"),
	't', 'run_batch returns NULL when there is nothing to do');

# run_batch is part of the caller's transaction
$kafka->produce_orders($topic, $orders, 100);
my $stats_before = sink_stats($plain, 'orders_manual');
is( $plain->safe_psql('postgres',
		"BEGIN; SELECT streaming.run_batch('orders_manual'); ROLLBACK;"),
	'1', 'run_batch in a transaction runs batch 1');
is(sink_stats($plain, 'orders_manual'), $stats_before,
	'a rolled-back run_batch leaves the sink as it was');
is($plain->safe_psql('postgres', "SELECT streaming.run_batch('orders_manual')"),
	'1', 'after the rollback, run_batch runs batch 1 again');
check_sink($plain, 'orders_manual', $orders, 'run_batch after a rollback');
check_offsets($plain, 'orders_manual', $kafka, $topic, 'run_batch');

my $preload_error = qr/streaming must be loaded via shared_preload_libraries.*\n(?:.*\n)*HINT:  Add streaming to shared_preload_libraries in postgresql.conf/;
like(psql_error($plain, "SELECT streaming.start('orders_manual')"),
	$preload_error,
	'start() fails and says to add streaming to shared_preload_libraries');
is(stream_row($plain, 'orders_manual')->{status},
	'stopped', 'the stream is still stopped');
like(
	psql_error($plain,
		"SELECT streaming.create_stream('orders_auto', 'SELECT order_id FROM orders_src', start => true)"
	),
	$preload_error,
	'create_stream(start => true) fails and says to add streaming to shared_preload_libraries'
);
is( $plain->safe_psql('postgres',
		"SELECT count(*) FROM streaming.streams WHERE name = 'orders_auto'")
	  . ' '
	  . $plain->safe_psql('postgres', "SELECT to_regclass('orders_auto') IS NULL"),
	'0 t', 'the failed create_stream left nothing behind');
is( $plain->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'streaming%'"),
	'0', 'no streaming process runs without shared_preload_libraries');

$plain->stop;
done_testing();
