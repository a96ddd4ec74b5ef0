# 017_kafka_sink.pl: Kafka -> stream -> Kafka sink, at-least-once through
# crashes (SPEC 6, 6.1).
#
# Orders are read from a topic by four streams: a stateless one and an
# update-mode aggregate over 10-minute windows, each twice, once into a Kafka
# sink and once into a table sink.  Then:
#
# 1. A crash between Kafka's confirmation and the outbox's delete, made
#    deterministic: a stopped stream's batch is run with run_batch (its rows
#    wait in the outbox), the batch's progress row is locked, the stream is
#    started: its worker delivers the rows, then waits for the lock to count
#    them; it is killed with SIGKILL there.  After the restart every row of
#    that batch is on the topic twice, with the same key, value and headers.
# 2. While the streams work through a backlog in batches of at most 2,000
#    records (and an outbox of at most 3,000 rows), their workers are killed
#    with SIGKILL or the server is stopped with "immediate" at random moments
#    (seeded: STREAMING_TEST_SEED replays a run).
#
# Read back with kcat at the end: every (stream, batch id, seq) carries one
# key and one value however often it repeats; a consumer that drops repeats
# by those headers sees exactly the rows of the table sink of the same
# stream; read as a compacted topic (the last value per key), the
# aggregate's topic equals its table sink; and each batch's progress row
# counts as delivered exactly the rows it wrote.
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
my $rounds = 6;
my @kinds = shuffle(('kill_worker') x ($rounds / 2), ('immediate') x ($rounds / 2));
note "crash plan: @kinds";

my $kafka = StreamingTest::Kafka->start;
my ($topic) = $kafka->create_topic('orders_015', 8);
my ($rows_topic) = $kafka->create_topic('orders_015_rows', 8);
my ($agg_topic) = $kafka->create_topic('orders_015_agg', 4);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 10_000);

my $node = streaming_node('main', conf => "streaming.outbox_max_rows = 3000\n");
create_orders_source($node, 'orders_src', $kafka, $topic, max_offsets_per_trigger => 2_000);
my $bs = $kafka->bootstrap;
my $rows_query = 'SELECT order_id, amount, status, event_time, kafka_partition, kafka_offset FROM orders_src';
my $agg_query = q{SELECT streaming.window_start() AS window_start, status, count(*) AS n, sum(amount) AS total
	FROM orders_src GROUP BY streaming.tumble(event_time, '10 minutes'), status};
$node->safe_psql('postgres', qq{
	SELECT streaming.create_kafka_sink('rows_sink', '$bs', '$rows_topic', key_columns => ARRAY['order_id']);
	SELECT streaming.create_kafka_sink('agg_sink', '$bs', '$agg_topic');
	SELECT streaming.create_stream('rows_kafka', \$\$$rows_query\$\$, sink => 'rows_sink');
	SELECT streaming.create_stream('rows_table', \$\$$rows_query\$\$);
	SELECT streaming.create_stream('agg_kafka', \$\$$agg_query\$\$, sink => 'agg_sink', output_mode => 'update');
	SELECT streaming.create_stream('agg_table', \$\$$agg_query\$\$, output_mode => 'update');
});
my @streams = qw(rows_kafka rows_table agg_kafka agg_table);

# process_available waits for a Kafka sink's outbox to be delivered, too
sub all_available
{
	my ($what) = @_;
	for my $s (@streams)
	{
		$node->safe_psql('postgres', "SELECT streaming.process_available('$s', '180s')");
	}
	is( $node->safe_psql('postgres',
			"SELECT string_agg(name || ':' || outbox_rows, ',' ORDER BY name) FROM streaming.streams WHERE outbox_rows IS NOT NULL"),
		'agg_kafka:0,rows_kafka:0',
		"$what: the Kafka sinks' outboxes are empty");
	return;
}
all_available('the first orders');

#
# 1. SIGKILL after Kafka confirmed a batch's messages, before their rows left
#    the outbox
#
$node->safe_psql('postgres', "SELECT streaming.stop('rows_kafka')");
$kafka->produce_orders($topic, $orders, 500);
my $held_batch = $node->safe_psql('postgres', "SELECT streaming.run_batch('rows_kafka')");
is( $node->safe_psql('postgres', "SELECT outbox_rows FROM streaming.streams WHERE name = 'rows_kafka'"),
	'500', "batch $held_batch (run_batch) waits in the outbox");
my $hold = $node->background_psql('postgres');
$hold->query_safe('BEGIN');
$hold->query_safe(
	"SELECT count(*) FROM (SELECT FROM streaming.batches b JOIN streaming.stream_defs s ON s.id = b.stream_id "
	  . "WHERE s.name = 'rows_kafka' AND b.batch_id = $held_batch FOR UPDATE OF b) x");
$node->safe_psql('postgres', "SELECT streaming.start('rows_kafka')");
wait_for($node,
	"SELECT count(*) = 1 FROM pg_stat_activity a JOIN streaming.streams s ON s.worker_pid = a.pid "
	  . "WHERE s.name = 'rows_kafka' AND a.wait_event_type = 'Lock'",
	't', 'the worker delivered the batch and waits to count it as delivered', 'rows_kafka');
my $pid = stream_row($node, 'rows_kafka')->{worker_pid};
ok(kill('KILL', $pid), "killed the worker ($pid) after Kafka confirmed batch $held_batch");
eval { $hold->quit; 1 } or note 'the holding session went with the crash';
wait_for($node,
	"SELECT count(*) = 4 FROM streaming.streams WHERE status = 'running' AND worker_pid IS NOT NULL",
	't', 'the streams run again after the crash');
all_available('after the crash between confirmation and delete');

#
# 2. crashes at random moments while the streams work through a backlog
#
for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];

	# a backlog of several batches each, there before the workers plan their
	# next batches: hold the streams' rows, as a batch does first thing
	my $hold_all = $node->background_psql('postgres');
	$hold_all->query_safe('BEGIN');
	$hold_all->query_safe(
		"SELECT count(*) FROM (SELECT FROM streaming.stream_defs FOR UPDATE) s");
	$kafka->produce_orders($topic, $orders, 5_000);
	$hold_all->query_safe('COMMIT');
	$hold_all->quit;
	usleep(int(rand(150_000)));
	if ($kind eq 'kill_worker')
	{
		my $stream = $streams[ int(rand(@streams)) ];
		wait_for($node,
			"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = '$stream'",
			't', "round $round: $stream has a worker", $stream);
		my $kpid = stream_row($node, $stream)->{worker_pid};
		note "round $round: kill -9 of the worker of $stream ($kpid), outbox rows: "
		  . query_retry($node, "SELECT string_agg(name || '=' || outbox_rows, ' ') FROM streaming.streams WHERE outbox_rows IS NOT NULL");
		ok(kill('KILL', $kpid), "round $round: killed worker $kpid");
	}
	else
	{
		note "round $round: immediate stop, outbox rows: "
		  . query_retry($node, "SELECT string_agg(name || '=' || outbox_rows, ' ') FROM streaming.streams WHERE outbox_rows IS NOT NULL");
		$node->stop('immediate');
		$node->start;
	}
	wait_for($node,
		"SELECT count(*) = 4 FROM streaming.streams WHERE status = 'running' AND worker_pid IS NOT NULL",
		't', "round $round ($kind): the streams run again");
}
all_available('after the crashes');
for my $s (@streams)
{
	check_progress($node, $s, $orders->count, "$s after the crashes");
}
check_sink($node, 'rows_table', $orders, 'the table sink after the crashes');
ok( $node->safe_psql('postgres', 'SELECT max(outbox_rows) FROM streaming.streams') == 0,
	'nothing waits in the outboxes');

#
# The topics, read back
#
my $n_rows = topic_table($node, $kafka, $rows_topic, 'rows_got');
my $n_agg = topic_table($node, $kafka, $agg_topic, 'agg_got');
note "the rows topic holds $n_rows messages for " . $orders->count . " orders, the aggregate's $n_agg";

# the crash between confirmation and delete: that batch's messages twice, the same
is( $node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT seq), min(n), max(n) FROM (SELECT seq, count(*) AS n, "
		  . "count(DISTINCT (key, value, headers)) AS versions FROM rows_got WHERE stream = 'rows_kafka' "
		  . "AND batch_id = $held_batch GROUP BY seq HAVING count(DISTINCT (key, value, headers)) = 1) x"),
	'500|500|2|2',
	"every message of batch $held_batch was sent again after the crash, with the same key, value and headers");

# repeats carry the same (stream, batch id, seq) and are the same message
for my $t ('rows_got', 'agg_got')
{
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM (SELECT stream, batch_id, seq FROM $t GROUP BY 1, 2, 3 "
			  . "HAVING count(DISTINCT (key, value)) > 1) x"),
		'0', "$t: a repeated (stream, batch id, seq) is the same key and value each time");
	is($node->safe_psql('postgres', "SELECT count(*) FROM $t WHERE stream IS NULL OR batch_id IS NULL OR seq IS NULL"),
		'0', "$t: every message has the headers streaming-stream, streaming-batch-id, streaming-seq");
}
my $repeats = $node->safe_psql('postgres',
	"SELECT count(*) - count(DISTINCT (stream, batch_id, seq)) FROM rows_got");
note "the rows topic holds $repeats repeated messages";
cmp_ok($repeats, '>=', 500, 'repeats were sent (at-least-once)');

# a consumer that drops repeats by the headers sees what the table sink holds
$node->safe_psql('postgres', q{
	CREATE VIEW rows_dedup AS
	SELECT r.* FROM (SELECT DISTINCT ON (stream, batch_id, seq) value FROM rows_got ORDER BY stream, batch_id, seq) d,
	    jsonb_populate_record(NULL::rows_table, d.value::jsonb) r;
});
compare_rows($node, 'rows_dedup', 'rows_table',
	'order_id, amount, status, event_time, kafka_partition, kafka_offset',
	'the rows topic without repeats equals the table sink');
is($node->safe_psql('postgres', "SELECT count(*) FROM rows_got WHERE key IS DISTINCT FROM (value::jsonb->>'order_id')"),
	'0', 'every message of the rows topic has its order id as key');

# the aggregate's topic as a compacted topic: the last value of each key
$node->safe_psql('postgres', q{
	CREATE VIEW agg_compacted AS
	SELECT r.* FROM (SELECT DISTINCT ON (key) value FROM agg_got ORDER BY key, part, off DESC) d,
	    jsonb_populate_record(NULL::agg_table, d.value::jsonb) r;
});
is($node->safe_psql('postgres', 'SELECT count(DISTINCT part) FROM (SELECT key, part FROM agg_got GROUP BY 1, 2) x GROUP BY key ORDER BY 1 DESC LIMIT 1'),
	'1', 'each key of the aggregate is in one partition');
compare_rows($node, 'agg_compacted', 'agg_table', 'window_start, status, n, total',
	'the last value of each key of the aggregate topic equals its table sink');

# progress: each batch's rows were delivered (as many messages as it wrote, once counted)
for my $s ('rows_kafka', 'agg_kafka')
{
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM streaming.progress WHERE stream = '$s' AND num_delivered_rows <> num_output_rows"),
		'0', "$s: progress counts every batch's rows as delivered");
}

$node->stop;
done_testing();
