# 014_joins.pl: stream-table joins run by workers, exactly once under
# crashes (SPEC 3.5, 6).
#
# Two streams read the same orders joined with a table of regions (the
# order's region is regions[order_id % 100]): a stateless one that adds the
# region to every order, and an update-mode aggregate that counts and sums
# the orders per region and status.  While they work through a backlog in
# batches of at most 2,000 records, their workers are killed with SIGKILL or
# the server is stopped with "immediate", at random moments (seeded).  At
# the end the stateless sink holds every order exactly once with its
# region, and the aggregate's sink equals the same join and GROUP BY in
# plain SQL over every order produced.
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
my ($topic, $nparts) = $kafka->create_topic('orders_014', 8);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 20_000);

my $node = streaming_node('main');
$node->safe_psql('postgres', q{
	CREATE TABLE regions (b int PRIMARY KEY, region text NOT NULL);
	INSERT INTO regions SELECT g, 'region ' || g % 7 FROM generate_series(0, 99) g;
});
create_orders_source($node, 'orders_src', $kafka, $topic, max_offsets_per_trigger => 2_000);
$node->safe_psql('postgres', q{
	SELECT streaming.create_stream('join_rows',
		$$SELECT o.order_id, o.amount, o.status, o.event_time, o.kafka_partition, o.kafka_offset, r.region
		  FROM orders_src o JOIN regions r ON r.b = o.order_id % 100$$);
	SELECT streaming.create_stream('join_counts',
		$$SELECT r.region, o.status, count(*) AS n, sum(o.amount) AS total
		  FROM orders_src o JOIN regions r ON r.b = o.order_id % 100 GROUP BY r.region, o.status$$,
		output_mode => 'update');
});

sub sink_rows
{
	return query_retry($node, 'SELECT count(*) FROM join_rows');
}

for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];

	$kafka->produce_orders($topic, $orders, 10_000);
	usleep(int(rand(60_000)));
	my $before = sink_rows();
	if ($kind eq 'kill_worker')
	{
		my $stream = rand() < 0.5 ? 'join_rows' : 'join_counts';
		wait_for($node,
			"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = '$stream'",
			't', "round $round: $stream has a worker", $stream);
		my $pid = stream_row($node, $stream)->{worker_pid};
		note "round $round: kill -9 of the worker of $stream ($pid) at $before rows";
		ok(kill('KILL', $pid), "round $round: killed worker $pid");
	}
	else
	{
		note "round $round: immediate stop at $before rows";
		$node->stop('immediate');
		$node->start;
	}
	wait_for($node,
		"SELECT count(*) = 2 FROM streaming.streams WHERE name LIKE 'join\\_%' "
		  . "AND status = 'running' AND worker_pid IS NOT NULL",
		't', "round $round ($kind): both streams run again");
}

for my $s ('join_rows', 'join_counts')
{
	$node->safe_psql('postgres', "SELECT streaming.process_available('$s', '180s')");
	check_progress($node, $s, $orders->count, "$s after the crashes");
}
check_sink($node, 'join_rows', $orders, 'the joined orders after the crashes');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM join_rows WHERE region <> 'region ' || (order_id % 100) % 7"),
	'0', 'every order has its region');

# the aggregate: the same join and GROUP BY in plain SQL over every order
orders_table($node, 'all_orders', [ map { ($orders->line($_))[0] } 1 .. $orders->count ]);
$node->safe_psql('postgres', q{
	CREATE VIEW join_counts_expected AS
	SELECT r.region, o.status, count(*) AS n, sum(o.amount) AS total
	FROM all_orders o JOIN regions r ON r.b = o.order_id % 100 GROUP BY r.region, o.status;
});
compare_rows($node, 'join_counts', 'join_counts_expected', 'region, status, n, total',
	'the aggregate over the join equals plain SQL');

$node->stop;
done_testing();
