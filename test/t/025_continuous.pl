# 025_continuous.pl: trigger => 'continuous' (SPEC 3.4) in every shape,
# exactly-once across kill -9 of the worker.
#
# Six streams read one Kafka topic with the continuous trigger: stateless
# (without and with two parallel helpers),
# a 5-minute tumbling window in update mode, dedup on order_id, a join with
# a table, and a session window in update mode.  Records arrive in small
# rounds, each waited for in every sink (a batch starts when a record
# arrives; nothing here depends on how fast).  Then a backlog is produced
# while the streams are held, and the worker of one of them is killed with
# SIGKILL as they go through it (the postmaster restarts every process).
# At the end every sink equals what PostgreSQL computes over the very same
# JSON lines (duplicates included: the first orders are produced twice),
# and the committed batches read every record once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_025', 4);
my $orders = StreamingTest::Orders->new;
my @lines;

my $node = streaming_node('main');
create_orders_source($node, 'orders_src', $kafka, $topic);
$node->safe_psql(
	'postgres', q{
CREATE TABLE status_labels (status text PRIMARY KEY, label text);
INSERT INTO status_labels VALUES ('created', 'new'), ('paid', 'money'), ('shipped', 'gone');
});
create_orders_stream($node, 'c_stateless', 'orders_src', trigger => "'continuous'");
create_orders_stream($node, 'c_parallel', 'orders_src', trigger => "'continuous'", parallel_workers => 2);
$node->safe_psql(
	'postgres', q{
SELECT streaming.create_stream('c_window',
    $$SELECT streaming.window_start() AS ws, status, count(*) AS n, sum(amount) AS total
      FROM orders_src GROUP BY streaming.tumble(event_time, '5 minutes'), status$$,
    output_mode => 'update', trigger => 'continuous');
SELECT streaming.create_stream('c_dedup', 'SELECT order_id, amount, status FROM orders_src',
    dedup_keys => ARRAY['order_id'], trigger => 'continuous');
SELECT streaming.create_stream('c_join',
    'SELECT o.order_id, o.amount, l.label FROM orders_src o JOIN status_labels l ON l.status = o.status',
    trigger => 'continuous');
SELECT streaming.create_stream('c_session',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status, count(*) AS n
      FROM orders_src GROUP BY streaming.session(event_time, '10 seconds'), status$$,
    output_mode => 'update', trigger => 'continuous');
});
my @streams = qw(c_stateless c_parallel c_window c_dedup c_join c_session);
my $names = join ', ', map { "'$_'" } @streams;

is( $node->safe_psql('postgres',
		"SELECT string_agg(DISTINCT trigger, ',') FROM streaming.streams WHERE name IN ($names)"),
	'continuous', 'streaming.streams shows the continuous trigger');

# records read by the committed batches of every stream, all equal to $n
sub all_read
{
	my ($n) = @_;
	return "SELECT bool_and(coalesce(r, 0) = $n) FROM (SELECT s.name, "
	  . "(SELECT sum(num_input_rows) FROM streaming.progress p WHERE p.stream = s.name) AS r "
	  . "FROM streaming.streams s WHERE s.name IN ($names)) x";
}

sub produce
{
	my ($new) = @_;
	$kafka->produce_lines($topic, $new);
	push @lines, @$new;
	return;
}

# small rounds: each is committed by every stream with nothing else to wait for
my $first = $orders->take(20);
for my $round (1 .. 5)
{
	my $new = $round == 1 ? $first : $orders->take(20);
	produce($new);
	wait_for($node, all_read(scalar @lines), 't',
		"round $round: every continuous stream committed the new records", 'c_stateless');
}
# duplicates for c_dedup (and counted twice by the others)
produce($first);
wait_for($node, all_read(scalar @lines), 't', 'the duplicates were read by every stream');

# a backlog, then kill -9 of one worker while the streams go through it
my $hold = hold_streams($node, "name IN ($names)");
produce($orders->take(3000));
my $pid = stream_row($node, 'c_window')->{worker_pid};
ok($pid, 'c_window has a worker');
release_streams($hold);
ok(kill('KILL', $pid), "killed c_window's worker $pid");
wait_for($node, all_read(scalar @lines), 't',
	'after kill -9, every stream read every record once', 'c_window');
produce($orders->take(50));
wait_for($node, all_read(scalar @lines), 't', 'and goes on committing new records', 'c_window');

orders_table($node, 'expected_orders', \@lines);
compare_rows($node, 'c_stateless', 'expected_orders', 'order_id, amount, status, event_time',
	'stateless: every record once');
is( $node->safe_psql('postgres',
		'SELECT count(DISTINCT (kafka_partition, kafka_offset)) = count(*) FROM c_stateless'),
	't', 'stateless: no position twice');
compare_rows($node, 'c_parallel', 'expected_orders', 'order_id, amount, status, event_time',
	'stateless with parallel helpers: every record once');
compare_rows(
	$node, 'c_window',
	"(SELECT date_bin('5 minutes', event_time, 'epoch') AS ws, status, count(*) AS n, sum(amount) AS total "
	  . "FROM expected_orders GROUP BY 1, 2) e",
	'ws, status, n, total', 'window in update mode: the GROUP BY of every record');
compare_rows(
	$node, 'c_dedup',
	'(SELECT DISTINCT order_id, amount, status FROM expected_orders) e',
	'order_id, amount, status', 'dedup: each order once');
compare_rows(
	$node, 'c_join',
	'(SELECT o.order_id, o.amount, l.label FROM expected_orders o JOIN status_labels l USING (status)) e',
	'order_id, amount, label', 'join with a table');
# order i has event time base + i seconds: each status's orders are 4 s
# apart, so with a 10-second gap all of a status make one session
compare_rows(
	$node, 'c_session',
	"(SELECT min(event_time) AS ws, max(event_time) + interval '10 seconds' AS we, status, count(*) AS n "
	  . "FROM expected_orders GROUP BY status) e",
	'ws, we, status, n', 'session window in update mode');

done_testing();
