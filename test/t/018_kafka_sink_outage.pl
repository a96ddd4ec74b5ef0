# 018_kafka_sink_outage.pl: a Kafka sink whose brokers go away or refuse
# (SPEC 6.1): nothing is lost, nothing is dropped silently.
#
# The sink writes to a broker of its own (a second mock broker), so the
# source goes on while the sink's brokers are down.  A stateless stream
# writes every order to the Kafka sink, another one into a table (the
# reference).
#
# 1. The sink's brokers are down while the stream works through a backlog:
#    the stream shows 'waiting' with a source_error, its worker stays,
#    batches go on until the outbox holds streaming.outbox_max_rows rows and
#    then wait (source_error: the sink is behind; the outbox never holds
#    more); the brokers back, delivery resumes by itself.
# 2. stop() while the brokers are down returns within kafka_timeout and
#    leaves the rows in the outbox; start() delivers them.
# 3. The topic does not exist, then refuses authorization: last_error says
#    so, the rows stay in the outbox; once the topic is fine, they go.
# 4. A message the broker refuses as too large goes to dead_letters with
#    its outbox position, counted in progress; the rest go on.
# At the end, the topic without repeats (by the headers) and the dead
# letter equal the table sink.
#
# The brokers are taken down and made to refuse by the mock broker: with
# KAFKA_BOOTSTRAP_SERVERS set this test is skipped.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(time usleep);

if (defined $ENV{KAFKA_BOOTSTRAP_SERVERS} && $ENV{KAFKA_BOOTSTRAP_SERVERS} ne '')
{
	plan skip_all => 'needs the mock broker to take the brokers down (KAFKA_BOOTSTRAP_SERVERS is set)';
}

my $kafka = StreamingTest::Kafka->start;
my $sink_kafka = StreamingTest::Kafka->start(name => 'sink');
my ($topic) = $kafka->create_topic('orders_016', 8);
my ($out) = $sink_kafka->create_topic('orders_016_out', 4);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 2_000);

my $max_rows = 2_000;
my $node = streaming_node('main',
	conf => "streaming.kafka_timeout = '2s'\nstreaming.retry_delay = '100ms'\n"
	  . "streaming.outbox_max_rows = $max_rows\n");
create_orders_source($node, 'orders_src', $kafka, $topic, max_offsets_per_trigger => 500);
my $bs = $sink_kafka->bootstrap;
my $query = 'SELECT order_id, amount, status, event_time, kafka_partition, kafka_offset FROM orders_src';
$node->safe_psql('postgres', qq{
	SELECT streaming.create_kafka_sink('out_sink', '$bs', '$out', key_columns => ARRAY['order_id']);
	SELECT streaming.create_stream('rows_kafka', \$\$$query\$\$, sink => 'out_sink', trigger => '100 milliseconds');
	SELECT streaming.create_stream('rows_table', \$\$$query\$\$, trigger => '100 milliseconds');
});

sub caught_up
{
	my ($what) = @_;
	for my $s ('rows_kafka', 'rows_table')
	{
		$node->safe_psql('postgres', "SELECT streaming.process_available('$s', '180s')");
	}
	# process_available returns once the outbox is empty; the worker shows
	# that its sink is fine again in its next transaction
	wait_for($node,
		"SELECT status || '|' || coalesce(source_error, '') || '|' || coalesce(last_error, '') || '|' || outbox_rows "
		  . "FROM streaming.streams WHERE name = 'rows_kafka'",
		'running|||0', "$what: the stream runs, with no source_error or last_error, and the outbox is empty",
		'rows_kafka');
	return;
}
caught_up('before the outages');

#
# 1. the sink's brokers down while the stream works through a backlog
#
# the backlog all there before the stream plans its next batch; the stream
# held (hold_streams, rehold_streams) once it delivered some of it, until
# the sink's brokers are down: whatever the speed of the machine, of
# producing or of the stream, they go down in the middle of the backlog
my $pid = stream_row($node, 'rows_kafka')->{worker_pid};
my $hold = hold_streams($node, "name = 'rows_kafka'");
$kafka->produce_orders($topic, $orders, 8_000);
my $delivered = "(SELECT sum(num_delivered_rows) FROM streaming.progress WHERE stream = 'rows_kafka')";
rehold_streams($hold, "name = 'rows_kafka'", "$delivered > 2000");
is( $hold->query_safe(
		"SELECT $delivered > 2000 AND lag > 0 FROM streaming.streams WHERE name = 'rows_kafka'"),
	't', 'the stream delivers the backlog, and has more of it to read');
$sink_kafka->down;
release_streams($hold);
# what the stream shows, looked at every 100 ms until it has shown all of
# it (or the timeout): waiting, the brokers unreachable, the outbox full,
# the sink behind, and the other stream done
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
my ($max_outbox, %status_seen, %pids, $behind, $unreachable, $table_rows) = (0);
while (1)
{
	my $r = query_retry($node,
		"SELECT status, outbox_rows, coalesce(source_error, ''), worker_pid, "
		  . "(SELECT count(*) FROM rows_table) FROM streaming.streams WHERE name = 'rows_kafka'");
	my ($status, $outbox, $error, $wpid, $trows) = split /\|/, $r;
	$max_outbox = $outbox if $outbox > $max_outbox;
	$status_seen{$status}++;
	$behind = $error if $error =~ /is behind/;
	$unreachable = $error if $error =~ /could not deliver/;
	$table_rows = $trows;
	$pids{$wpid}++;
	last if $status_seen{waiting} && defined $unreachable && defined $behind
	  && $max_outbox >= $max_rows && $table_rows == $orders->count;
	last if time() > $deadline;
	usleep(100_000);
}
note "during the outage: statuses " . join(', ', map { "$_ x$status_seen{$_}" } sort keys %status_seen)
  . ", at most $max_outbox rows in the outbox";
note "source_error: $unreachable" if $unreachable;
note "source_error: $behind" if $behind;
is(join(',', keys %pids), $pid, 'the same worker ran throughout the outage');
ok($status_seen{waiting}, "the stream was waiting while the sink's brokers were down");
ok(defined $unreachable, 'source_error said the brokers could not be reached');
is($max_outbox, $max_rows, "batches went on until the outbox held streaming.outbox_max_rows ($max_rows) rows, never more");
ok(defined $behind, 'then source_error said the sink was behind');
is($table_rows, $orders->count, 'the stream into a table went on meanwhile');
cmp_ok( $node->safe_psql('postgres', "SELECT lag FROM streaming.streams WHERE name = 'rows_kafka'"), '>', 0,
	'the stream into the Kafka sink waited with records left to read');
$sink_kafka->up;
wait_for($node,
	"SELECT status = 'running' AND outbox_rows = 0 AND lag = 0 FROM streaming.streams WHERE name = 'rows_kafka'",
	't', 'delivery resumed by itself when the brokers came back', 'rows_kafka', 120);
caught_up('after the outage');

#
# 2. stop() while the brokers are down: the rows stay for the next start
#
$sink_kafka->down;
$kafka->produce_orders($topic, $orders, 300);
wait_for($node,
	"SELECT outbox_rows = 300 FROM streaming.streams WHERE name = 'rows_kafka'",
	't', 'the new rows wait in the outbox', 'rows_kafka');
my $t0 = time();
$node->safe_psql('postgres', "SELECT streaming.stop('rows_kafka')");
my $took = time() - $t0;
note sprintf('stop() took %.1f s', $took);
# two deliveries that wait kafka_timeout (2 s) each at the most (the one in
# flight, and the last before the worker exits), and room for a loaded
# machine (stop() took 4 s under load); a worker that waited for its
# messages would keep stop() until stop's own timeout (60 s)
cmp_ok($took, '<', 2 * 2 + 6, 'stop() returned within the kafka_timeout of a delivery or two');
is($node->safe_psql('postgres', "SELECT status || ' ' || outbox_rows FROM streaming.streams WHERE name = 'rows_kafka'"),
	'stopped 300', 'the stopped stream keeps its undelivered rows');
$sink_kafka->up;
$node->safe_psql('postgres', "SELECT streaming.start('rows_kafka')");
caught_up('after stop and start');

#
# 3. the topic does not exist, then refuses us: last_error, the rows stay
#
for my $case (['UNKNOWN_TOPIC_OR_PART', 'does not exist'], ['TOPIC_AUTHORIZATION_FAILED', 'refused'])
{
	my ($err, $says) = @$case;

	# a new producer asks for the topic's metadata first
	$node->safe_psql('postgres', "SELECT streaming.stop('rows_kafka')");
	$sink_kafka->topic_error($out, $err);
	$kafka->produce_orders($topic, $orders, 100);
	$node->safe_psql('postgres', "SELECT streaming.start('rows_kafka')");
	wait_for($node,
		"SELECT status = 'waiting' AND last_error LIKE '%$says%' AND outbox_rows = 100 FROM streaming.streams WHERE name = 'rows_kafka'",
		't', "$err: the stream waits, and last_error says why", 'rows_kafka');
	note "$err: last_error: " . stream_row($node, 'rows_kafka')->{last_error};
	# batches go on, and their rows wait too
	$kafka->produce_orders($topic, $orders, 10);
	wait_for($node,
		"SELECT status = 'waiting' AND last_error LIKE '%$says%' AND outbox_rows = 110 FROM streaming.streams WHERE name = 'rows_kafka'",
		't', "$err: the next batch's rows wait in the outbox too, nothing is dropped", 'rows_kafka');
	$sink_kafka->topic_error($out, 'NO_ERROR');
	caught_up("$err: once the topic is fine");
}

#
# 4. a message the broker refuses as too large: a dead letter, the rest go on
#
$sink_kafka->produce_error('MSG_SIZE_TOO_LARGE', 1);
my $big = $orders->count + 1;
$kafka->produce_orders($topic, $orders, 1);
wait_for($node,
	"SELECT count(*) = 1 FROM streaming.dead_letters WHERE stream = 'rows_kafka'",
	't', 'the refused message went to dead_letters', 'rows_kafka');
my $dl = $node->safe_psql('postgres',
	"SELECT position->>'sink', position->>'batch_id' = b.batch_id::text, position ? 'seq', sqlstate, "
	  . "convert_from(raw, 'UTF8')::jsonb->>'order_id' FROM streaming.dead_letters d, "
	  . "(SELECT max(batch_id) AS batch_id FROM streaming.progress WHERE stream = 'rows_kafka' AND num_rejected_rows = 1) b "
	  . "WHERE d.stream = 'rows_kafka'");
is($dl, "out_sink|t|t|54000|$big", 'the dead letter names the sink and the outbox position, and holds the message');
note 'dead letter: ' . $node->safe_psql('postgres', "SELECT error FROM streaming.dead_letters WHERE stream = 'rows_kafka'");
is( $node->safe_psql('postgres',
		"SELECT raw_length = octet_length(raw) AND raw_length > 0 AND raw_sha256 = sha256(raw) "
		  . "FROM streaming.dead_letters WHERE stream = 'rows_kafka'"),
	't', 'the dead letter has the length and SHA-256 of the whole message');
$kafka->produce_orders($topic, $orders, 200);
caught_up('after the message too large');
is($node->safe_psql('postgres', "SELECT sum(num_rejected_rows) FROM streaming.progress WHERE stream = 'rows_kafka'"),
	'1', 'progress counts the refused message');

#
# The topic, read back: without repeats, and with the dead letter, it is the table sink
#
my $n = topic_table($node, $sink_kafka, $out, 'got');
note "the topic holds $n messages for " . $orders->count . ' orders';
$node->safe_psql('postgres', q{
	CREATE VIEW kafka_side AS
	SELECT r.* FROM (SELECT DISTINCT ON (stream, batch_id, seq) value FROM got ORDER BY stream, batch_id, seq) d,
	    jsonb_populate_record(NULL::rows_table, d.value::jsonb) r
	UNION ALL
	SELECT r.* FROM streaming.dead_letters l, jsonb_populate_record(NULL::rows_table, convert_from(l.raw, 'UTF8')::jsonb) r
	WHERE l.stream = 'rows_kafka';
});
compare_rows($node, 'kafka_side', 'rows_table',
	'order_id, amount, status, event_time, kafka_partition, kafka_offset',
	'the topic without repeats, and the dead letter, equal the table sink');
check_sink($node, 'rows_table', $orders, 'the table sink');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT stream, batch_id, seq FROM got GROUP BY 1, 2, 3 HAVING count(DISTINCT (key, value)) > 1) x"),
	'0', 'a repeated (stream, batch id, seq) is the same message each time');

$node->stop;
done_testing();
