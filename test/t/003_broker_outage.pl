# 003_broker_outage.pl: a stream survives its Kafka cluster going away
# (SPEC 4: status 'waiting', SPEC 6: exactly once across outages).
#
# The mock broker takes all its brokers down on SIGUSR1 and brings them
# back on SIGUSR2.  Twice (once while the stream is idle, once while it is
# working through a backlog) the brokers go down: the stream's status must
# become 'waiting' with a source_error, its worker keeps running, and when
# the brokers are back the status returns to 'running' and every record is
# consumed exactly once.  process_available called during the outage waits
# for the brokers and returns once they are back.  A real broker cannot be
# taken down: with KAFKA_BOOTSTRAP_SERVERS set this test is skipped.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

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

# outage(WHAT, after_down => CODE, while_down => CODE): brokers down (then
# after_down) until the stream waits, then while_down, which may return
# what to do once the brokers are up, then up until it runs
sub outage
{
	my ($what, %hook) = @_;
	my $pid = stream_row($node, 'orders_out')->{worker_pid};

	$kafka->down;
	$hook{after_down}->() if $hook{after_down};
	wait_for($node,
		"SELECT status = 'waiting' AND source_error IS NOT NULL FROM streaming.streams WHERE name = 'orders_out'",
		't', "$what: the status becomes waiting", 'orders_out', 60);
	my $row = stream_row($node, 'orders_out');
	note "$what: source_error: $row->{source_error}";
	isnt($row->{source_error}, '', "$what: source_error says what is wrong");
	is($row->{worker_pid}, $pid,
		"$what: the worker keeps running while the brokers are down");

	my $after_up = $hook{while_down} ? $hook{while_down}->() : undef;
	$kafka->up;
	$after_up->() if $after_up;
	wait_for($node,
		"SELECT status = 'running' FROM streaming.streams WHERE name = 'orders_out'",
		't', "$what: the status is running again", 'orders_out', 60);
	return;
}

# process_available called while the brokers are down waits for them: a
# broker that does not answer is asked again until its timeout.  Started
# while they are down; once it waits to ask again (in its source loop: wait
# event Extension, after a Kafka call of kafka_timeout failed) the brokers
# come back, and it returns without an error.  Returns what to do once they
# are up.
sub process_available_during_outage
{
	my ($pa_out, $pa_err) = ('', '');
	my $pa = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
			'-c', "SELECT streaming.process_available('orders_out', '120s')" ],
		'<', \undef, '>', \$pa_out, '2>', \$pa_err);
	# looked at from one session, every 10 ms: the wait lasts 200 ms
	my $watch = $node->background_psql('postgres');
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $asks_again = 0;
	while (!$asks_again && $pa->pumpable && time() < $deadline)
	{
		$asks_again = $watch->query_safe(
			"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT streaming.process_available(%' "
			  . "AND state = 'active' AND wait_event = 'Extension'");
		$pa->pump_nb;
		usleep(10_000) unless $asks_again;
	}
	$watch->quit;
	ok($asks_again, "process_available during the outage asks the brokers again ($pa_err)");
	return sub {
		ok($pa->finish && $pa_err eq '',
			"process_available during the outage returns once the brokers are back ($pa_err)");
	};
}

#
# Outage while the stream is idle (everything consumed)
#
outage('idle stream', while_down => \&process_available_during_outage);
$kafka->produce_orders($topic, $orders, 6_000);
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_out', '120s')");
check_sink($node, 'orders_out', $orders, 'after the outage of an idle stream');
is(stream_row($node, 'orders_out')->{source_error},
	'', 'a committed batch clears source_error');

#
# Outage in the middle of a backlog, read 2,000 records per batch.  The
# backlog is all there before the stream plans its next batch, and the
# stream is held (hold_streams, rehold_streams) once it has read 6,000 of
# it until the brokers are down: whatever the speed of the machine, of
# producing or of the stream, they go down in the middle of the backlog.
#
my $before = $orders->count;
my $hold = hold_streams($node, "name = 'orders_out'");
$kafka->produce_orders($topic, $orders, 24_000);
rehold_streams($hold, "name = 'orders_out'", "(SELECT count(*) FROM orders_out) >= $before + 6000");
my $read = $hold->query_safe('SELECT count(*) FROM orders_out');
ok($read >= $before + 6000 && $read < $orders->count,
	"the stream works through the backlog, and the brokers go down before it is consumed ($read of "
	  . $orders->count . ' read)');
outage('busy stream', after_down => sub { release_streams($hold) });
$node->safe_psql('postgres',
	"SELECT streaming.process_available('orders_out', '120s')");

check_sink($node, 'orders_out', $orders, 'after the outages');
check_offsets($node, 'orders_out', $kafka, $topic, 'after the outages');
check_progress($node, 'orders_out', $orders->count, 'after the outages');
# (a Kafka call that a loaded machine keeps past kafka_timeout, 2 s here,
# makes the stream wait until the next one: waited for, not read once)
wait_for($node,
	"SELECT status || '|' || coalesce(source_error, '') || '|' || coalesce(last_error, '') "
	  . "FROM streaming.streams WHERE name = 'orders_out'",
	'running||', 'the stream is running, with no source_error and no last_error', 'orders_out');

$node->stop;
done_testing();
