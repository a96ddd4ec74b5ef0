# 005_dump.pl: pg_dump keeps streams (SPEC 1).
#
# The catalog tables are extension configuration tables, so a dump of a
# database holds the sources, the streams, their committed positions and
# their history together with the sinks.  Restored into another database,
# a stream goes on from exactly where the dump left it: the records it had
# read are not read again, the new ones are read once.  A stream that ran
# when it was dumped is restored stopped (a WARNING says so), and runs
# only once it is started; then it goes on exactly once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_005', 4);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 2_000);

my $node = streaming_node('main');
create_orders_source($node, 'orders_src', $kafka, $topic);
create_orders_stream($node, 'orders_all', 'orders_src', start => 'false');
is($node->safe_psql('postgres', "SELECT streaming.run_batch('orders_all')"),
	'0', 'the first batch ran in the original database');
check_sink($node, 'orders_all', $orders, 'before the dump');

# dump the database, restore it into a new one
my $dump = $node->basedir . '/streams.sql';
$node->command_ok(
	[ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with streams');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('restored'),
		'-f', $dump ],
	'the dump restores');

my $catalog = q{
	SELECT s.name, s.source, s.sink, s.status, s.last_batch_id,
	       (SELECT string_agg(format('%s/%s=%s', topic, partition, committed_offset), ','
	                          ORDER BY topic, partition)
	          FROM streaming.source_lag l WHERE l.stream = s.name) AS positions,
	       (SELECT count(*) FROM streaming.progress p WHERE p.stream = s.name) AS batches
	FROM streaming.streams s ORDER BY s.name};
is($node->safe_psql('restored', $catalog),
	$node->safe_psql('postgres', $catalog),
	'the restored database has the same streams, positions and history');
is( $node->safe_psql('restored',
		"SELECT name, kind, options->>'columns' FROM streaming.sources"),
	'orders_src|kafka|' . ORDER_COLUMNS,
	'the restored database has the source');
is($node->safe_psql('restored', 'SELECT count(*) FROM orders_src'),
	'0', 'the source view is restored');
my $sink_sql = 'SELECT count(*), sum(amount), sum(order_id) FROM orders_all';
is($node->safe_psql('restored', $sink_sql), $node->safe_psql('postgres', $sink_sql),
	'the restored sink holds the same rows');

# the restored stream goes on from the dumped positions
$kafka->produce_orders($topic, $orders, 1_000);
my $before = $node->safe_psql('restored', 'SELECT count(*) FROM orders_all');
is($node->safe_psql('restored', "SELECT streaming.run_batch('orders_all')"),
	'1', 'the restored stream runs its next batch');
is($node->safe_psql('restored', 'SELECT count(*) FROM orders_all') - $before,
	1_000, 'it read exactly the records produced after the dump');
is( $node->safe_psql('restored',
		'SELECT count(*) = count(DISTINCT (kafka_partition, kafka_offset)) FROM orders_all'),
	't', 'no record was read twice');
is( $node->safe_psql('restored',
		"SELECT count(*) FROM orders_all"),
	$orders->count, 'the restored sink holds every record produced');

#
# a stream that runs when it is dumped is restored stopped
#
create_orders_stream($node, 'orders_live', 'orders_src', start => 'true');
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_live', '60s')");
check_sink($node, 'orders_live', $orders, 'the running stream, before the dump');
my $live_dump = $node->basedir . '/live.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $live_dump ],
	'pg_dump while a stream runs');
$node->safe_psql('postgres', 'CREATE DATABASE restored_live');
my ($rc, $out, $err) = $node->psql('restored_live', "\\i $live_dump",
	extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, 'the dump of a running stream restores');
like($err, qr/WARNING:  stream "orders_live" is restored stopped\n.*HINT:  Start it with streaming\.start\('orders_live'\) where it should run\./s,
	'the restore says the stream is restored stopped');
is( $node->safe_psql('restored_live',
		"SELECT status, worker_pid IS NULL FROM streaming.streams WHERE name = 'orders_live'"),
	'stopped|t', 'the restored stream is stopped and has no worker');
is( $node->safe_psql('restored_live', 'SELECT enabled FROM streaming.stream_defs WHERE name = \'orders_live\''),
	'f', 'and it is not enabled, so no restart brings it up');
$node->restart;
is( $node->safe_psql('restored_live',
		"SELECT status, worker_pid IS NULL FROM streaming.streams WHERE name = 'orders_live'"),
	'stopped|t', 'after a server restart it is still stopped');
is($node->safe_psql('postgres', "SELECT status FROM streaming.streams WHERE name = 'orders_live'"),
	'running', 'the original stream runs on');
$kafka->produce_orders($topic, $orders, 500);
$node->safe_psql('postgres', "SELECT streaming.process_available('orders_live', '60s')");
check_sink($node, 'orders_live', $orders, 'the original stream, after the restore');
is($node->safe_psql('restored_live', 'SELECT count(*) FROM orders_live'),
	$orders->count - 500, 'the stopped restored stream read nothing new');
$node->safe_psql('restored_live', "SELECT streaming.start('orders_live')");
$node->safe_psql('restored_live', "SELECT streaming.process_available('orders_live', '60s')");
my $stats_sql = "SELECT count(*), coalesce(sum(amount), 0.00), coalesce(sum(order_id), 0), "
  . "count(DISTINCT (kafka_partition, kafka_offset)), count(DISTINCT order_id), "
  . "coalesce(md5(string_agg(order_id::text, ',' ORDER BY order_id)), '') FROM orders_live";
is($node->safe_psql('restored_live', $stats_sql), $orders->expected_stats,
	'started, the restored stream reads on from its dumped positions: every record once');
is($node->safe_psql('restored_live', "SELECT status FROM streaming.streams WHERE name = 'orders_live'"),
	'running', 'and it runs');
$node->safe_psql('restored_live', "SELECT streaming.stop('orders_live')");
$node->safe_psql('postgres', "SELECT streaming.stop('orders_live')");

$node->stop;
$kafka->stop;
done_testing();

