# 029_continuous_wakeup.pl: a continuous stream goes to sleep after a batch
# that left nothing for the next one, without an empty plan, and wakes up for
# the next record (SPEC 3.4: no fixed wait between records and their
# commit).
#
# streaming.naptime is 10 minutes here, so that a wake-up the worker missed
# (records held after a batch, or a queue the worker did not see) shows as a
# timeout, not as a batch one naptime later.  Two streams read one topic:
# one uncapped, one with max_offsets_per_trigger => 3, whose batches leave
# records behind for the next one (what they leave must be planned at once).
# Records arrive in rounds, each waited for; at the end both sinks hold every
# record once.  Then a stream that has been idle: after the last round, its
# worker runs no more batches (the wait is the sleep on the sources' wake-up,
# not a loop of empty plans).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_029', 4);
my $orders = StreamingTest::Orders->new;
my @lines;

my $node = streaming_node('main', conf => "streaming.naptime = '10min'\n");
create_orders_source($node, 'w_src', $kafka, $topic);
create_orders_source($node, 'w_capped_src', $kafka, $topic, max_offsets_per_trigger => 3);
create_orders_stream($node, 'w_plain', 'w_src', trigger => "'continuous'");
create_orders_stream($node, 'w_capped', 'w_capped_src', trigger => "'continuous'");

sub all_read
{
	my ($n) = @_;
	return "SELECT (SELECT count(*) FROM w_plain) = $n AND (SELECT count(*) FROM w_capped) = $n";
}

for my $round (1 .. 6)
{
	my $new = $orders->take($round == 1 ? 2 : 11);
	$kafka->produce_lines($topic, $new);
	push @lines, @$new;
	wait_for($node, all_read(scalar @lines), 't',
		"round $round: both streams committed the new records without a naptime", 'w_capped',
		120);
}

orders_table($node, 'expected_orders', \@lines);
for my $s (qw(w_plain w_capped))
{
	compare_rows($node, $s, 'expected_orders', 'order_id, amount, status, event_time',
		"$s: every record once");
}
is( $node->safe_psql('postgres',
		"SELECT bool_and(num_input_rows <= 3) FROM streaming.progress WHERE stream = 'w_capped'"),
	't', 'w_capped: its batches were capped');

# idle, then one record: one batch, at once (the worker slept on the
# sources' wake-up, with the 10-minute naptime)
my $batches = $node->safe_psql('postgres',
	"SELECT count(*) FROM streaming.batches b JOIN streaming.stream_defs d ON d.id = b.stream_id WHERE d.name = 'w_plain'");
my $pid = stream_row($node, 'w_plain')->{worker_pid};
ok($pid, 'w_plain has a worker');
# a new record after the idle time is committed at once
my $last = $orders->take(1);
$kafka->produce_lines($topic, $last);
push @lines, @$last;
wait_for($node, all_read(scalar @lines), 't', 'a record after the idle time is committed', 'w_plain', 120);
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streaming.batches b JOIN streaming.stream_defs d ON d.id = b.stream_id WHERE d.name = 'w_plain'"),
	$batches + 1, 'w_plain: one batch for the one record');

$node->stop;
$kafka->stop;
done_testing();
