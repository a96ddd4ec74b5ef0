# 028_stream_join_dump.pl: a stream-stream join with process_available
# over its two sources, into a Kafka sink, and through pg_dump (SPEC 3.6,
# issue 19 item 6; SPEC 1, 6.1).
#
# Orders and payments on two topics of two partitions; two worker-driven
# streams join them in batches of at most 40 records per source: an inner
# join into a Kafka sink (keyed by order_id) and a left outer join into a
# table, order_id equal and the payment within 30 minutes of its order, a
# watermark of 1 hour on each side.
#
# 1. process_available waits for both sources: when it returns, both
#    sources' committed positions are at the ends of their topics, and the
#    sinks hold every pair whose two rows were produced.
# 2. pg_dump while the state tables hold rows (the last orders have no
#    payment yet); restored into another database, the stream is stopped,
#    its state tables hold the same rows as the original's, owned as the
#    original's, and the restored stream goes on: payments of the orders
#    stored before the dump still join them, every record is read once, and
#    after a flush (an order and payment a day later) the left join equals
#    the same join over all records, NULL rows included.
# 3. The Kafka sink: its topic, with repeats dropped by their headers,
#    equals the same inner join over all records; every message is keyed by
#    its order id.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($orders_topic) = $kafka->create_topic('orders_028', 2);
my ($payments_topic) = $kafka->create_topic('payments_028', 2);
my ($paid_topic) = $kafka->create_topic('paid_028', 2);

my $node = streaming_node('main');
orders_payments_sources($node, $kafka, $orders_topic, $payments_topic, 40);
my $bs = StreamingTest::quote_literal($kafka->bootstrap);
my $watermarks = orders_payments_watermarks();
$node->safe_psql('postgres', "SELECT streaming.create_kafka_sink('paid_sink', $bs, '$paid_topic', key_columns => ARRAY['order_id'])");
$node->safe_psql('postgres',
	"SELECT streaming.create_stream('paid_kafka', \$\$" . orders_payments_join('JOIN') . "\$\$, sink => 'paid_sink', watermarks => $watermarks, start => false)");
$node->safe_psql('postgres',
	"SELECT streaming.create_stream('orders_left', \$\$" . orders_payments_join('LEFT JOIN') . "\$\$, watermarks => $watermarks, start => false)");

# orders a minute apart; most have a payment 0-30 minutes later, some none,
# some one outside the 30 minutes; payments produced in order of their
# times, so that no row is late (the delay is an hour), while the streams
# are stopped (a topic's partitions are produced one after the other: a
# stream reading one before the other is there would find the other's
# records late)
my $base = 1_704_067_200;    # 2024-01-01 00:00:00 UTC
my $next_order = 1;
my @pending;                 # payments not produced yet: [time, line]
my ($norders, $npayments) = (0, 0);
my @dbs = ('postgres');

# produce N orders (at: their time) and the payments due by the last one's
# time (all with flush), into the topics and every database's tables
sub produce
{
	my ($n, %opts) = @_;
	my (@o, @p);
	my $last = 0;
	for (1 .. $n)
	{
		my $id = $next_order++;
		my $t = $opts{at} // $base + 60 * $id;
		$last = $t;
		push @o, sprintf('{"order_id": %d, "amount": %.2f, "order_time": "%s"}', $id, 1 + ($id % 97), iso_utc($t));
		my $r = $id % 10;
		my @delays = $opts{at} ? (0) : $r == 3 ? () : $r == 7 ? (1801 + 60 * ($id % 5)) : ((37 * $id) % 1801);
		my $k = 0;
		push @pending, map { [ $t + $_, sprintf('{"payment_id": %d, "order_id": %d, "payment_time": "%s"}', $id * 10 + $k++, $id, iso_utc($t + $_)) ] } @delays;
	}
	@pending = sort { $a->[0] <=> $b->[0] } @pending;
	push @p, map { $_->[1] } grep { $opts{flush} || $_->[0] <= $last } @pending;
	@pending = grep { !($opts{flush} || $_->[0] <= $last) } @pending;
	$kafka->produce_lines($orders_topic, \@o);
	$kafka->produce_lines($payments_topic, \@p) if @p;
	for my $db (@dbs)
	{
		$node->safe_psql($db, "INSERT INTO orders_in SELECT d::jsonb FROM unnest(" . sql_array(\@o) . "::text[]) d");
		$node->safe_psql($db, "INSERT INTO payments_in SELECT d::jsonb FROM unnest(" . sql_array(\@p) . "::text[]) d")
		  if @p;
	}
	$norders += @o;
	$npayments += @p;
	return;
}

# every record produced so far read, in both sources, by the stream's
# committed positions
sub read_all
{
	my ($db, $stream, $what) = @_;
	is( $node->safe_psql($db,
			"SELECT string_agg(source || '=' || n, ',' ORDER BY source) FROM (SELECT p.source, sum(p.position) AS n "
			  . "FROM streaming.positions p JOIN streaming.stream_defs d ON d.id = p.stream_id "
			  . "WHERE d.name = '$stream' GROUP BY p.source) s"),
		"orders_src=$norders,payments_src=$npayments",
		"$what: $stream has read every order and payment");
	return;
}

#
# 1. process_available over two sources
#
produce(300);
$node->safe_psql('postgres', "SELECT streaming.start('$_')") for qw(paid_kafka orders_left);
for my $stream (qw(paid_kafka orders_left))
{
	$node->safe_psql('postgres', "SELECT streaming.process_available('$stream', '180s')");
	read_all('postgres', $stream, 'process_available returned');
	cmp_ok($node->safe_psql('postgres', "SELECT max(batch_id) FROM streaming.progress WHERE stream = '$stream'"),
		'>=', 7, "$stream took several batches (at most 40 records per source each)");
}
is( $node->safe_psql('postgres', "SELECT outbox_rows FROM streaming.streams WHERE name = 'paid_kafka'"),
	'0', 'the Kafka sink delivered every pair');
# every pair whose rows were both produced is there (the inner join's
# rows do not wait for the watermark)
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT order_id, amount, payment_id, payment_time FROM orders_left WHERE payment_id IS NOT NULL "
		  . "EXCEPT ALL SELECT * FROM paid_expected) d"),
	'0', 'the left join gave no pair that is not one');
is( $node->safe_psql('postgres', 'SELECT count(*) FROM orders_left WHERE payment_id IS NOT NULL'),
	$node->safe_psql('postgres', 'SELECT count(*) FROM paid_expected'),
	'the left join gave every pair of the records produced');

#
# 2. pg_dump with rows in the state tables, restored into another database
#
$node->safe_psql('postgres', "SELECT streaming.stop('$_')") for qw(paid_kafka orders_left);
my $state_sql = q{
	SELECT s.side, s.n, s.owner FROM streaming.stream_defs d,
	  LATERAL (SELECT 'left' AS side, (SELECT count(*) FROM streaming.join_%1$s_left) AS n,
	                  (SELECT relowner::regrole::text FROM pg_class WHERE oid = 'streaming.join_%1$s_left'::regclass) AS owner
	           UNION ALL
	           SELECT 'right', (SELECT count(*) FROM streaming.join_%1$s_right),
	                  (SELECT relowner::regrole::text FROM pg_class WHERE oid = 'streaming.join_%1$s_right'::regclass)) s
	 WHERE d.name = 'orders_left' ORDER BY 1};
my $id = $node->safe_psql('postgres', "SELECT id FROM streaming.stream_defs WHERE name = 'orders_left'");
my $state_before = $node->safe_psql('postgres', sprintf($state_sql, $id));
like($state_before, qr/^left\|[1-9]\d*\|/, "the left side's state holds rows at the dump");
note "state at the dump (side|rows|owner): " . join(', ', split /\n/, $state_before);
my $stored_sql = "SELECT string_agg(order_id::text, ',' ORDER BY order_id) FROM streaming.join_${id}_left";
my $stored_before = $node->safe_psql('postgres', $stored_sql);

my $dump = $node->basedir . '/join.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with stream-stream joins');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
my ($rc, $out, $err) = $node->psql('restored', "\\i $dump", extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, 'the dump restores') or diag($err);
push @dbs, 'restored';
is( $node->safe_psql('restored', "SELECT string_agg(name || ':' || status, ',' ORDER BY name) FROM streaming.streams"),
	'orders_left:stopped,paid_kafka:stopped', 'both restored streams are stopped');
my $rid = $node->safe_psql('restored', "SELECT id FROM streaming.stream_defs WHERE name = 'orders_left'");
is($node->safe_psql('restored', sprintf($state_sql, $rid)), $state_before,
	'the restored state tables hold as many rows as the original ones, with the same owner');
is($node->safe_psql('restored', "SELECT string_agg(order_id::text, ',' ORDER BY order_id) FROM streaming.join_${rid}_left"),
	$stored_before, 'and the same orders');
is( $node->safe_psql('restored',
		"SELECT string_agg(source, ',' ORDER BY source) FROM streaming.streams WHERE name = 'orders_left'"),
	$node->safe_psql('postgres',
		"SELECT string_agg(source, ',' ORDER BY source) FROM streaming.streams WHERE name = 'orders_left'"),
	'the restored stream names both sources');

# more orders and the payments of those stored at the dump, then a flush
produce(200);
produce(1, at => $base + 60 * $next_order + 86_400, flush => 1);
for my $db ('postgres', 'restored')
{
	$node->safe_psql($db, "SELECT streaming.start('orders_left')");
	$node->safe_psql($db, "SELECT streaming.process_available('orders_left', '180s')");
	read_all($db, 'orders_left', "$db, after the flush");
}
$node->safe_psql('postgres', "SELECT streaming.start('paid_kafka')");
$node->safe_psql('postgres', "SELECT streaming.process_available('paid_kafka', '180s')");
read_all('postgres', 'paid_kafka', 'postgres, after the flush');
for my $db ('postgres', 'restored')
{
	my $sql = "SELECT (SELECT count(*) FROM (TABLE orders_left EXCEPT ALL TABLE orders_left_expected) a), "
	  . "(SELECT count(*) FROM (TABLE orders_left_expected EXCEPT ALL TABLE orders_left) b), "
	  . "(SELECT count(*) FROM orders_left), (SELECT count(*) FROM orders_left WHERE payment_id IS NULL)";
	my ($only_sink, $only_expected, $n, $nulls) = split /\|/, $node->safe_psql($db, $sql);
	is("$only_sink|$only_expected", '0|0',
		"$db: the left join equals the join over all records ($n rows, $nulls NULL rows)");
	cmp_ok($nulls, '>', 0, "$db: with the NULL rows of the orders that never matched");
	is( $node->safe_psql($db,
			"SELECT coalesce(sum((state_operators -> 'o' ->> 'numRowsDroppedByWatermark')::bigint + "
			  . "(state_operators -> 'p' ->> 'numRowsDroppedByWatermark')::bigint), 0) "
			  . "FROM streaming.progress WHERE stream = 'orders_left'"),
		'0', "$db: no row was late");
}
is($node->safe_psql('restored', sprintf(
	"SELECT (SELECT count(*) FROM streaming.join_%1\$s_left) || '/' || (SELECT count(*) FROM streaming.join_%1\$s_right)", $rid)),
	'1/1', 'the restored state holds the last order and payment only');
$node->safe_psql($_, "SELECT streaming.stop('orders_left')") for ('postgres', 'restored');

#
# 3. the Kafka sink fed by the join
#
$node->safe_psql('postgres', "SELECT streaming.stop('paid_kafka')");
my $messages = topic_table($node, $kafka, $paid_topic, 'paid_got');
cmp_ok($messages, '>', 0, "the join's Kafka topic holds $messages messages");
$node->safe_psql('postgres', q{
	CREATE TABLE paid_shape (order_id bigint, amount numeric(12,2), payment_id bigint, payment_time timestamptz);
	CREATE VIEW paid_dedup AS
	SELECT r.* FROM (SELECT DISTINCT ON (stream, batch_id, seq) value FROM paid_got ORDER BY stream, batch_id, seq) d,
	    jsonb_populate_record(NULL::paid_shape, d.value::jsonb) r;
});
compare_rows($node, 'paid_dedup', 'paid_expected', 'order_id, amount, payment_id, payment_time',
	'the Kafka topic without repeats equals the inner join over all records');
is($node->safe_psql('postgres', "SELECT count(*) FROM paid_got WHERE key IS DISTINCT FROM (value::jsonb->>'order_id')"),
	'0', 'every message has its order id as key');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.progress WHERE stream = 'paid_kafka' AND num_delivered_rows <> num_output_rows"),
	'0', "progress counts every batch's rows as delivered");

$node->stop;
$kafka->stop;
done_testing();
