# 003_broker_outage.pl: a stream survives its Kafka cluster going away
# (SPEC 4: status 'waiting', SPEC 6: exactly once across outages).
#
# The mock broker takes all its brokers down on SIGUSR1 and brings them
# back on SIGUSR2.  Twice (once while the stream is idle, once while it is
# working through a backlog) the brokers go down: the stream's status must
# become 'waiting' with a source_error, its worker keeps running, and when
# the brokers are back the status returns to 'running' and every record is
# consumed exactly once.  A real broker cannot be taken down: with
# KAFKA_BOOTSTRAP_SERVERS set this test is skipped.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

if (defined $ENV{KAFKA_BOOTSTRAP_SERVERS} && $ENV{KAFKA_BOOTSTRAP_SERVERS} ne '')
{
	plan skip_all => 'needs the mock broker to take the brokers down (KAFKA_BOOTSTRAP_SERVERS is set)';
}

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_003', 8);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 10_000);

# Kafka calls give up after 2 seconds, so that an outage shows quickly
my $node = streaming_node('main',
	conf => "streaming.kafka_timeout = '2s'\nstreaming.retry_delay = '100ms'\n");
create_orders_source($node, 'orders_src', $kafka, $topic,
	max_offsets_per_trigger => 2_000);
# a batch of at most 2,000 records every half second: a backlog lasts
create_orders_stream($node, 'orders_out', 'orders_src', start => 'true',
	trigger => "'500 milliseconds'");
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_out', '120s')");
check_sink($node, 'orders_out', $orders, 'before the outages');

# outage(WHAT): brokers down until the stream waits, then up until it runs
sub outage
{
	my ($what) = @_;
	my $pid = stream_row($node, 'orders_out')->{worker_pid};

	$kafka->down;
	wait_for($node,
		"SELECT status = 'waiting' AND source_error IS NOT NULL FROM streaming.streams WHERE name = 'orders_out'",
		't', "$what: the status becomes waiting", 'orders_out', 60);
	my $row = stream_row($node, 'orders_out');
	note "$what: source_error: $row->{source_error}";
	isnt($row->{source_error}, '', "$what: source_error says what is wrong");
	is($row->{worker_pid}, $pid,
		"$what: the worker keeps running while the brokers are down");

	$kafka->up;
	wait_for($node,
		"SELECT status = 'running' FROM streaming.streams WHERE name = 'orders_out'",
		't', "$what: the status is running again", 'orders_out', 60);
	return;
}

#
# Outage while the stream is idle (everything consumed)
#
outage('idle stream');
$kafka->produce_orders($topic, $orders, 6_000);
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_out', '120s')");
check_sink($node, 'orders_out', $orders, 'after the outage of an idle stream');
is(stream_row($node, 'orders_out')->{source_error},
	'', 'a committed batch clears source_error');

#
# Outage in the middle of a backlog, read 2,000 records per batch
#
my $before = $orders->count;
$kafka->produce_orders($topic, $orders, 24_000);
wait_for($node, "SELECT count(*) >= $before + 6000 FROM orders_out",
	't', 'the stream works through the backlog', 'orders_out');
ok( $node->safe_psql('postgres', 'SELECT count(*) FROM orders_out') <
	  $orders->count,
	'the brokers go down before the backlog is consumed');
outage('busy stream');
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_out', '120s')");

check_sink($node, 'orders_out', $orders, 'after the outages');
check_offsets($node, 'orders_out', $kafka, $topic, 'after the outages');
check_progress($node, 'orders_out', $orders->count, 'after the outages');
my $row = stream_row($node, 'orders_out');
is($row->{status}, 'running', 'the stream is running');
is($row->{source_error}, '', 'the stream has no source_error');
is($row->{last_error}, '', 'the stream has no last_error');

$node->stop;
done_testing();
