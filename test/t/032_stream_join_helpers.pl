# 032_stream_join_helpers.pl: parallel helpers for joins of two sources
# (issue 21 item 1, SPEC 3.6): both sources' partitions split over the
# helpers and the worker, each helper's rows tagged with their source, the
# join run by the worker.
#
# Orders and payments on two 4-partition topics, read in small batches
# (max_offsets_per_trigger).  Each shape runs twice, with
# parallel_workers => 2 and => 0: an inner join and a left outer join
# (a payment within 30 minutes of its order, a watermark of 1 hour on each
# side), and a self-join of the orders (one source under two aliases, read
# once); and the inner join once more with parallel_workers NULL
# (automatic), which takes helpers from both sources' partitions.  Each
# round produces its orders and the payments of the next round's orders
# (payments before their orders), and some of this round's, so a pair's
# two rows arrive in either order, in one batch or in two.  While a round
# waits (the streams held between two batches), the worker of a stream
# with helpers is killed with kill -9.  At the end an order and its
# payment far later in event time move the watermark past every other
# row, so the left join gives the NULL row of every order that never
# matched.  Then every stream's sink is the same join over all records in
# plain tables (every pair, every NULL row exactly once), each pair of
# streams holds the same rows, no row was late, every record was read
# once and the positions are the topics' ends.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($orders_topic) = $kafka->create_topic('orders_032', 4);
my ($payments_topic) = $kafka->create_topic('payments_032', 4);

my $node = streaming_node('main',
	conf => "streaming.retry_delay = '100ms'\nstreaming.max_retries = 1000\n");
orders_payments_sources($node, $kafka, $orders_topic, $payments_topic, 120);
my ($shapes, $streams, $expected) = orders_payments_twins($node);
# automatic: helpers from both sources' partitions
$node->safe_psql('postgres',
	"SELECT streaming.create_stream('paid_auto', \$\$" . orders_payments_join('JOIN') . "\$\$, watermarks => " . orders_payments_watermarks() . ")");
push @$streams, 'paid_auto';
$expected->{paid_auto} = 'paid_expected';
my @shapes = @$shapes;
my @streams = @$streams;
my %expected = %$expected;

my $rounds = StreamingTest::OrderPaymentRounds->new($node, $kafka, $orders_topic, $payments_topic);

$rounds->first_round(\@streams, \@shapes);
is(scalar(helper_pids($node, 'paid_auto')), 2,
	'parallel_workers NULL: a join takes two helpers from its sources\' partitions');

# a round waits while the worker of a stream with helpers is killed
for my $victim ('orders_left_2', 'paid_2', 'self_2')
{
	my $hold = hold_streams($node, 'true');
	$rounds->round(400);
	my ($before, $pid) = split /\|/, $hold->query_safe(
		"SELECT coalesce(last_batch_id, -1), worker_pid FROM streaming.streams WHERE name = '$victim'");
	ok($pid, "$victim has a worker ($pid) after batch $before");
	ok(kill('KILL', $pid), "kill -9 of the worker $pid of $victim while a round waits");
	eval { release_streams($hold); 1 } or note 'the holding session went with the restart';
	wait_for($node,
		"SELECT status = 'running' AND worker_pid IS NOT NULL AND worker_pid <> $pid "
		  . "AND coalesce(last_batch_id, -1) > $before FROM streaming.streams WHERE name = '$victim'",
		't', "$victim runs again in a new worker, and makes progress", $victim);
	$rounds->process_all(\@streams);
}
$rounds->finish_and_check(\@streams, \%expected);
my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /terminated by signal 9: Killed/g;
is($signal_9, 3, 'the postmaster saw the three killed workers');

$node->stop;
done_testing();
