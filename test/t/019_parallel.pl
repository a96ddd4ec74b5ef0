# 019_parallel.pl: parallel parse (parallel_workers, src/parallel.c).
#
# A stateless stream with two helpers reads a 16-partition topic in small
# batches (max_offsets_per_trigger), bad records included: the sink holds
# every order once, the bad records are in dead_letters with their
# positions, and the helpers live as long as the worker (the same pids
# from batch to batch).  Then, while a backlog waits (the stream held
# between two of its batches), a helper is stopped (SIGTERM: the leader
# sees it detach, the batch fails and runs again with new helpers) and
# another killed with kill -9 (the postmaster restarts every process):
# nothing is lost or doubled.  alter_stream changes the
# number of helpers of the running stream.  Streams left at parallel_workers
# NULL take streaming.max_parallel_workers_per_stream helpers when their
# shape allows, none otherwise.  An aggregate stream with two
# helpers (partial states combined by the worker) reads the same source
# through all of it, and ends equal to a GROUP BY over the stateless sink.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_019', 16);
my $orders = StreamingTest::Orders->new;
my $poison = $kafka->produce_orders($topic, $orders, 20_000,
	poison_at => [ 10, 5_000, 12_345 ]);

my $node = streaming_node('main');
create_orders_source($node, 'orders_src', $kafka, $topic,
	max_offsets_per_trigger => 2_000);
create_orders_stream($node, 'orders_par', 'orders_src',
	parallel_workers => 2, start => 'true');
$node->safe_psql('postgres',
	"SELECT streaming.create_stream('orders_agg', 'SELECT status, count(*) AS n, sum(amount) AS total, "
	  . "min(order_id) AS first, max(event_time) AS last FROM orders_src GROUP BY status', "
	  . "output_mode => 'complete', parallel_workers => 2)");

sub helpers
{
	my ($stream) = @_;
	return query_retry($node, "SELECT count(*) FROM pg_stat_activity WHERE " . helpers_of($stream));
}

$node->safe_psql('postgres', "SELECT streaming.process_available('orders_par', '120s')");
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_agg', '120s')");
check_sink($node, 'orders_par', $orders, 'two helpers');
check_offsets($node, 'orders_par', $kafka, $topic, 'two helpers');
check_progress($node, 'orders_par', $orders->count + 3, 'two helpers');
is( $node->safe_psql('postgres',
		"SELECT string_agg((position->>'partition') || ':' || (position->>'offset'), ' ' "
		  . "ORDER BY (position->>'partition')::int, (position->>'offset')::bigint) "
		  . "FROM streaming.dead_letters WHERE stream = 'orders_par'"),
	join(' ', map { "$_->[0]:$_->[1]" } sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @$poison),
	'the bad records are in dead_letters at their positions');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.dead_letters WHERE stream = 'orders_par' "
		  . "AND raw_length = length(raw) AND raw_sha256 = sha256(raw) AND sqlstate = '22P02'"),
	'3', 'each dead letter has its raw record, length, hash and SQLSTATE');
is(helpers('orders_par'), '2', 'the stateless stream has two helpers');
is(helpers('orders_agg'), '2', 'the aggregate stream has two helpers');
my @pids = helper_pids($node, 'orders_par');
ok( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.progress WHERE stream = 'orders_par'") >= 10,
	'the stream ran many batches');

# the helpers live as long as the worker: the same ones after more batches
$kafka->produce_orders($topic, $orders, 4_000);
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_par', '120s')");
check_sink($node, 'orders_par', $orders, 'more batches');
is(join(',', helper_pids($node, 'orders_par')), join(',', @pids), 'the same helpers read every batch');

# a helper that is told to stop, then one killed with kill -9, while a
# backlog waits
my $with_backlog = 0;
for my $kind ('TERM', 'KILL')
{
	# a backlog of many batches, all there before the worker plans its next
	# batch, and the helper signalled before it does (hold_streams): the
	# backlog waits whatever the speed of the machine, of the stream or of
	# this test (under load the stream read all of it between its release
	# and a signal sent right after)
	my $hold = hold_streams($node, "name = 'orders_par'");
	$kafka->produce_orders($topic, $orders, 50_000);
	my ($victim) = helper_pids($node, 'orders_par');
	my $before = $hold->query_safe('SELECT count(*) FROM orders_par');
	ok(kill($kind, $victim), "$kind: signalled helper $victim");
	note "$kind of helper $victim at $before of " . $orders->count . " rows";
	$with_backlog++ if $before < $orders->count;
	# (kill -9 restarts every process: the holding session goes too)
	eval { release_streams($hold); 1 } or note 'the holding session went with the restart';
	# more records, so that a batch surely follows (helpers start with the
	# first batch that has records)
	$kafka->produce_orders($topic, $orders, 2_000);
	wait_for($node,
		"SELECT count(*) > $before FROM orders_par",
		't', "$kind: the stream makes progress again", 'orders_par');
	wait_for($node,
		"SELECT count(*) = 2 AND bool_and(pid <> $victim) FROM pg_stat_activity WHERE "
		  . helpers_of('orders_par'),
		't', "$kind: the stream has two new helpers", 'orders_par');
	query_retry($node, "SELECT streaming.process_available('orders_par', '180s')");
	check_sink($node, 'orders_par', $orders, "after $kind of a helper");
	check_offsets($node, 'orders_par', $kafka, $topic, "after $kind of a helper");
	check_progress($node, 'orders_par', $orders->count + 3, "after $kind of a helper");
	is(stream_row($node, 'orders_par')->{status}, 'running', "$kind: the stream is running");
}
is($with_backlog, 2, 'each helper went while records were waiting');
my $log = slurp_file($node->logfile);
like($log, qr/parallel helper \d+ of stream "[^"]+" exited during the batch/,
	'the leader failed the batch whose helper went');
like($log, qr/streaming helper.*terminated by signal 9/,
	'the postmaster saw the killed helper');

# alter_stream: the running stream takes the new number at its next batch
$node->safe_psql('postgres',
	"SELECT streaming.alter_stream('orders_par', parallel_workers => 1)");
$kafka->produce_orders($topic, $orders, 2_000);
wait_for($node,
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE " . helpers_of('orders_par'),
	't', 'one helper after alter_stream', 'orders_par');
$node->safe_psql('postgres',
	"SELECT streaming.alter_stream('orders_par', parallel_workers => 0)");
$kafka->produce_orders($topic, $orders, 2_000);
wait_for($node,
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE " . helpers_of('orders_par'),
	't', 'no helper after alter_stream to 0', 'orders_par');
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_par', '120s')");
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_agg', '120s')");
check_sink($node, 'orders_par', $orders, 'after alter_stream');
check_progress($node, 'orders_par', $orders->count + 3, 'after alter_stream');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM orders_par GROUP BY order_id HAVING count(*) > 1"),
	'', 'no order is in the sink twice');
# the aggregate stream, with its helpers through the same kills
my $group_by = "SELECT status, count(*) AS n, sum(amount) AS total, min(order_id) AS first, "
  . "max(event_time) AS last FROM orders_par GROUP BY status";
is( $node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM (SELECT status, n, total, first, last FROM orders_agg "
		  . "EXCEPT ALL $group_by) a), (SELECT count(*) FROM ($group_by EXCEPT ALL "
		  . "SELECT status, n, total, first, last FROM orders_agg) b), (SELECT count(*) FROM orders_agg)"),
	'0|0|4', 'the aggregate stream with helpers equals GROUP BY over every order');
check_progress($node, 'orders_agg', $orders->count + 3, 'the aggregate stream');
is(stream_row($node, 'orders_agg')->{status}, 'running', 'the aggregate stream is running');

# parallel_workers NULL (the default): automatic, as many helpers as
# streaming.max_parallel_workers_per_stream allows for a shape they run
# (here 2; the setting is read when the worker starts): dedup_keys too
query_retry($node,
	"ALTER SYSTEM SET streaming.max_parallel_workers_per_stream = 2; SELECT pg_reload_conf()");
wait_for($node, 'SHOW streaming.max_parallel_workers_per_stream', '2',
	'a new process has streaming.max_parallel_workers_per_stream = 2');
create_orders_stream($node, 'orders_auto', 'orders_src', start => 'true');
create_orders_stream($node, 'orders_auto_dedup', 'orders_src',
	dedup_keys => "ARRAY['order_id']", start => 'true');
is( $node->safe_psql('postgres',
		"SELECT string_agg(coalesce(parallel_workers::text, 'NULL'), ',' ORDER BY name) "
		  . "FROM streaming.stream_defs WHERE name LIKE 'orders\\_auto%'"),
	'NULL,NULL', 'both are stored as automatic (NULL)');
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_auto', '120s')");
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_auto_dedup', '120s')");
check_sink($node, 'orders_auto', $orders, 'automatic helpers');
check_progress($node, 'orders_auto', $orders->count + 3, 'automatic helpers');
is(helpers('orders_auto'), '2', 'the automatic stateless stream has two helpers');
is(helpers('orders_auto_dedup'), '2', 'the automatic dedup stream has two helpers');
is( $node->safe_psql('postgres',
		"SELECT count(*) = count(DISTINCT order_id) AND count(*) = (SELECT count(DISTINCT order_id) FROM orders_auto) "
		  . "FROM orders_auto_dedup"),
	't', 'the automatic dedup stream has every order once, with helpers');

$node->stop;
done_testing();
