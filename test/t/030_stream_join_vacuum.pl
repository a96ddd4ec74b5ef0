# 030_stream_join_vacuum.pl: a stream-stream join's state tables stay the
# size of its state (SPEC 3.6; issue 19).
#
# A join's state is a queue in event time: each batch stores its new rows
# and evicts about as many older ones.  The stream's worker vacuums a side's
# state table after a committed batch once the batches since its last
# VACUUM left enough dead rows, so that new rows reuse the evicted rows'
# pages.  Here autovacuum is off (only the worker's VACUUM can free them):
# a left join of 2,400 orders (one a minute) and their payments, read in
# batches of at most 150 records a topic, holds at most 280 rows a side; then an order and its payment a day later flush the state.
# Checked:
#   - the sink is the join over all records (EXCEPT ALL both ways), NULL
#     rows included, and nothing was late;
#   - both state tables were vacuumed (pg_stat_user_tables.vacuum_count),
#     and no VACUUM failed (no WARNING);
#   - each state table's heap is less than a third of what every row of
#     its side would take (a table of as many copies of its last row):
#     without the VACUUM every row would have gone into a new page;
#   - the state rows never exceeded what the watermark keeps.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $seed = test_seed();
my $kafka = StreamingTest::Kafka->start;
my ($orders_topic) = $kafka->create_topic('orders_030', 1);
my ($payments_topic) = $kafka->create_topic('payments_030', 1);

my $node = streaming_node('main', conf => "autovacuum = off\n");
orders_payments_sources($node, $kafka, $orders_topic, $payments_topic, 150);

# orders a minute apart, each with one payment: most 0-30 minutes later,
# some later than that (their orders give NULL rows); as many records on
# each topic, so that both sides' batches cover the same event time
my $base = 1_704_067_200;    # 2024-01-01 00:00:00 UTC
my $norders = 2400;
my (@o, @p);
sub order_and_payments
{
	my ($id, $t, @delays) = @_;
	push @o, sprintf('{"order_id": %d, "amount": %.2f, "order_time": "%s"}', $id, 1 + rand(500), iso_utc($t));
	my $k = 0;
	push @p, sprintf('{"payment_id": %d, "order_id": %d, "payment_time": "%s"}', $id * 10 + $k++, $id, iso_utc($t + $_))
	  for @delays;
	return;
}
for my $id (1 .. $norders)
{
	order_and_payments($id, $base + 60 * $id, rand() < 0.08 ? 1801 + int(rand(600)) : int(rand(1801)));
}
# payments in the order of their times, as a payment service would send them
@p = map { $_->[1] } sort { $a->[0] cmp $b->[0] } map { [ /"payment_time": "([^"]+)"/, $_ ] } @p;

sub load
{
	my ($orders, $payments) = @_;
	$kafka->produce_lines($orders_topic, $orders);
	$kafka->produce_lines($payments_topic, $payments);
	$node->safe_psql('postgres',
		"INSERT INTO orders_in SELECT d::jsonb FROM unnest(" . sql_array($orders) . "::text[]) d");
	$node->safe_psql('postgres',
		"INSERT INTO payments_in SELECT d::jsonb FROM unnest(" . sql_array($payments) . "::text[]) d");
	return;
}
load(\@o, \@p);
my $npayments = @p;
is($npayments, $norders, 'one payment per order');

$node->safe_psql('postgres',
	q{SELECT streaming.create_stream('orders_left', $$SELECT o.order_id, o.amount, p.payment_id, p.payment_time
	   FROM orders_src o LEFT JOIN payments_src p
	     ON p.order_id = o.order_id
	    AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes'$$,
	 watermarks => '{"o": {"event_time": "order_time", "delay": "1 hour"},
	                 "p": {"event_time": "payment_time", "delay": "1 hour"}}')});
my $id = $node->safe_psql('postgres', "SELECT id FROM streaming.stream_defs WHERE name = 'orders_left'");

# waited for with short queries: a long one's snapshot would keep VACUUM
# from removing what the batches evict meanwhile
wait_for($node,
	"SELECT lag = 0 AND last_batch_id IS NOT NULL FROM streaming.streams WHERE name = 'orders_left'",
	't', 'the stream read every record', 'orders_left');

# the flush: an order and its payment a day after the others
@o = ();
@p = ();
my $flush = $norders + 1;
order_and_payments($flush, $base + 60 * $flush + 86_400, 0);
load(\@o, \@p);
$norders++;
$npayments++;
my $expected = $node->safe_psql('postgres', 'SELECT count(*) FROM orders_left_expected');
wait_for($node, "SELECT count(*) >= $expected FROM orders_left", 't',
	"the sink has its $expected rows", 'orders_left');
wait_for($node,
	"SELECT lag = 0 AND watermark > '2024-01-03 12:00' FROM streaming.streams WHERE name = 'orders_left'",
	't', 'caught up, the watermark past every other row', 'orders_left');
wait_for($node,
	"SELECT num_input_rows = 0 FROM streaming.progress WHERE stream = 'orders_left' ORDER BY batch_id DESC LIMIT 1",
	't', 'the last batch is the no-data batch', 'orders_left');

is( $node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM (TABLE orders_left EXCEPT ALL TABLE orders_left_expected) a) || '/' ||
		        (SELECT count(*) FROM (TABLE orders_left_expected EXCEPT ALL TABLE orders_left) b)"),
	'0/0', 'the sink is the join over all records, every row exactly once');
ok($node->safe_psql('postgres', 'SELECT count(*) FROM orders_left WHERE payment_id IS NULL') > 0,
	'some orders gave their NULL rows');
is($node->safe_psql('postgres',
		"SELECT coalesce(sum(num_late_rows), 0) FROM streaming.progress WHERE stream = 'orders_left'"),
	'0', 'no row was late');
is( $node->safe_psql('postgres',
		"SELECT (SELECT string_agg(order_id::text, ',') FROM streaming.join_${id}_left) || '/' ||
		        (SELECT string_agg(order_id::text, ',') FROM streaming.join_${id}_right)"),
	"$flush/$flush", 'only the last order and its payment are still stored');

# the worker's VACUUM: the stream's last VACUUM may follow its last batch's commit
for my $side ('left', 'right')
{
	wait_for($node,
		"SELECT vacuum_count > 0 FROM pg_stat_user_tables WHERE relid = 'streaming.join_${id}_$side'::regclass",
		't', "the $side state table was vacuumed by the worker", 'orders_left');
	is($node->safe_psql('postgres',
			"SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'streaming.join_${id}_$side'::regclass"),
		'0', "the $side state table: not by autovacuum");
}
for my $s ([ 'left', $norders ], [ 'right', $npayments ])
{
	my ($side, $rows) = @$s;
	$node->safe_psql('postgres',
		"CREATE TABLE every_$side AS SELECT s.* FROM streaming.join_${id}_$side s, generate_series(1, $rows)");
	my ($state, $every) = split /\|/, $node->safe_psql('postgres',
		"SELECT pg_relation_size('streaming.join_${id}_$side'), pg_relation_size('every_$side')");
	note "$side: state table $state bytes, $rows rows of its shape $every bytes";
	ok($state * 3 < $every, "the $side state table ($state bytes) is less than a third of its $rows rows ($every bytes)");
}
my ($peak_o, $peak_p) = split /\|/, $node->safe_psql('postgres',
	"SELECT max((state_operators->'o'->>'numRowsTotal')::bigint), max((state_operators->'p'->>'numRowsTotal')::bigint)
	 FROM streaming.progress WHERE stream = 'orders_left'");
note "peak state rows: orders $peak_o, payments $peak_p";
# a batch's 150 rows and what the watermark keeps (1 hour of delay, the
# 30-minute bound, payments up to 40 minutes behind: 2 hours and 10
# minutes of event time, 130 rows): at most 280 a side
ok($peak_o <= 280 && $peak_p <= 280, "the state stayed bounded by the watermark (orders $peak_o, payments $peak_p)");
unlike(slurp_file($node->logfile), qr/could not vacuum the state tables/, 'no VACUUM of the state failed');

$node->stop;
done_testing();
