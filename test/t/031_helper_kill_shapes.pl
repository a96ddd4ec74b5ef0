# 031_helper_kill_shapes.pl: a HELPER (not the worker) of a stream-stream
# join dies mid-batch (issue 21, "helpers are covered in every shape,
# including kill -9 of helpers").  Audit of the other shapes: stateless,
# windows, dedup, session windows, late_rows keep and table joins are
# covered by 027 (kill -9 of a helper, helper_chunk error and kill -9);
# rate and file sources by 034 (kill -9 of a helper only); stream-stream
# joins by 032 (kill -9 of the worker only).  This test fills the join gap:
# for the inner join, the left join and the self-join (parallel_workers 2,
# each beside a twin with none), kill -9 of one helper while a round waits,
# then the fault point helper_chunk with error and with kill -9.  Then the
# same end checks as 032: each sink is the join over plain tables, no row
# late, every record read once, positions at the topics' ends.
# The inputs are 032's (orders_payments_sources, StreamingTest::OrderPaymentRounds).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($orders_topic) = $kafka->create_topic('orders_031', 4);
my ($payments_topic) = $kafka->create_topic('payments_031', 4);

my $node = streaming_node('main',
	conf => "streaming.retry_delay = '100ms'\nstreaming.max_retries = 1000\n");
orders_payments_sources($node, $kafka, $orders_topic, $payments_topic, 120);
my ($shapes, $streams, $expected) = orders_payments_twins($node);
my @shapes = @$shapes;
my @streams = @$streams;
my %expected = %$expected;

my $rounds = StreamingTest::OrderPaymentRounds->new($node, $kafka, $orders_topic, $payments_topic);

$rounds->first_round(\@streams, \@shapes);

# kill -9 of one HELPER of each join stream while a round waits (every
# stream held between two batches, so the backlog is there when it plans)
my $killed = 0;
for my $victim ('orders_left_2', 'paid_2', 'self_2')
{
	my $hold = hold_streams($node, 'true');
	$rounds->round(400);
	my ($pid) = helper_pids($node, $victim);
	ok($pid, "$victim has a helper ($pid)");
	ok(kill('KILL', $pid), "kill -9 of helper $pid of $victim while a round waits");
	$killed++;
	eval { release_streams($hold); 1 } or note 'the holding session went with the restart';
	wait_for($node,
		"SELECT count(*) = 2 AND bool_and(pid <> $pid) FROM pg_stat_activity WHERE " . helpers_of($victim),
		't', "$victim has two new helpers", $victim);
	$rounds->process_all(\@streams);
}

# the fault point helper_chunk (a helper fails after sending a chunk's
# rows): with an error (the worker fails the batch and retries it), then
# with kill -9; cleared once reached
for my $action ('error', 'kill9')
{
	my $hold = hold_streams($node, 'true');
	$rounds->round(400);
	my $log_start = -s $node->logfile;
	set_fault($node, "helper_chunk:$action");
	eval { release_streams($hold); 1 } or note 'the holding session went';
	$node->wait_for_log(qr/streaming fault point reached: helper_chunk/, $log_start);
	set_fault($node, undef);
	$killed++ if $action eq 'kill9';
	$rounds->process_all(\@streams);
}
$rounds->finish_and_check(\@streams, \%expected);
my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /streaming helper.*terminated by signal 9/g;
ok($signal_9 >= $killed, "the postmaster saw the killed helpers ($signal_9 >= $killed)");
like($log, qr/parallel helper \d+ of stream "[^"]+"/, 'a worker failed the batch whose helper failed');

$node->stop;
done_testing();
