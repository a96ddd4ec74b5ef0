# 027_helper_shapes.pl: parallel helpers for the shapes whose step after
# parsing the worker runs over the rows its helpers parsed (issue 21):
# dedup_keys, a join with a table, session windows with late_rows =>
# 'keep', and a tumbling window with late_rows => 'keep' (the helpers
# pre-aggregate and hand their late rows on).
#
# Each stream runs twice over one 16-partition topic, in small batches
# (max_offsets_per_trigger): with parallel_workers => 2 and => 0.  Orders
# come once, then again (duplicates for dedup, late rows for the windows:
# their event times are far behind the watermark by then), bad records
# among them.  While a backlog waits (the streams with helpers held
# between two of their batches), a helper of the dedup stream is killed
# with kill -9 (the postmaster restarts every process).  Afterwards every
# pair holds the same rows, the same late rows and the same dead letters,
# and the streams with helpers read every record once: nothing lost or
# doubled.  Then a helper fails in the middle of its share (the fault
# point helper_chunk): with an error, then with kill -9; the same again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic) = $kafka->create_topic('orders_027', 16);
my $orders = StreamingTest::Orders->new;
my $first = $orders->take(10_000);
$kafka->produce_lines($topic, $first);
$kafka->produce_lines($topic, [ '{"order_id": 1, "amount": ', @{ $first }[ 0 .. 1_999 ] ]);

# retries without a limit: a batch whose helper fails at its fault point
# until the test has cleared it must not fail the stream for good
my $node = streaming_node('main',
	conf => "streaming.retry_delay = '100ms'\nstreaming.max_retries = 1000\n");
create_orders_source($node, 'src', $kafka, $topic, max_offsets_per_trigger => 2_000,
	on_bad_record => "'dead_letter'");
$node->safe_psql('postgres',
	"CREATE TABLE statuses (status text PRIMARY KEY, label text); "
	  . "INSERT INTO statuses VALUES ('created', 'C'), ('paid', 'P'), ('shipped', 'S')");

my %shapes = (
	dedup => [ 'SELECT order_id, amount, status, event_time FROM src', "dedup_keys => ARRAY['order_id']" ],
	join => [
		'SELECT o.order_id, o.amount, s.label, o.kafka_partition, o.kafka_offset FROM src o '
		  . 'JOIN statuses s ON s.status = o.status WHERE o.amount > 10',
		''
	],
	session => [
		'SELECT streaming.window_start() AS ws, status, count(*) AS n, sum(amount) AS total FROM src '
		  . "WHERE order_id % 5 <> 0 GROUP BY streaming.session(event_time, ''30 seconds''), status",
		"output_mode => 'update', watermark => '1 minute', late_rows => 'keep'"
	],
	late => [
		'SELECT streaming.window_start() AS ws, status, count(*) AS n, sum(amount) AS total FROM src '
		  . "GROUP BY streaming.tumble(event_time, ''1 minute''), status",
		"watermark => '1 minute', late_rows => 'keep'"
	],);
my @pairs = sort keys %shapes;
for my $shape (@pairs)
{
	my ($query, $args) = @{ $shapes{$shape} };
	for my $w (0, 2)
	{
		$node->safe_psql('postgres',
			    "SELECT streaming.create_stream('${shape}_$w', '$query', parallel_workers => $w"
			  . ($args ne '' ? ", $args" : '') . ')');
	}
}

sub process_all
{
	for my $shape (@pairs)
	{
		query_retry($node, "SELECT streaming.process_available('${shape}_$_', '180s')") for (0, 2);
	}
}

# each pair: the same sink rows and late rows (and on the first pass the
# same dead letters), every record read once (COUNT in all), every stream
# running; dedup kept every order once
sub check_pairs
{
	my ($what, $count, $first) = @_;
	my $late = "SELECT position, event_time FROM streaming.late_rows WHERE stream = ";
	my $bad = "SELECT position, raw FROM streaming.dead_letters WHERE stream = ";
	for my $shape (@pairs)
	{
		my ($a, $b) = ("${shape}_0", "${shape}_2");
		compare_rows($node, $b, $a, '*', "$what: $shape with helpers holds the rows it holds without");
		is( $node->safe_psql('postgres',
				"SELECT (SELECT count(*) FROM ($late '$a' EXCEPT ALL $late '$b') d) "
				  . "+ (SELECT count(*) FROM ($late '$b' EXCEPT ALL $late '$a') d)"),
			'0', "$what: $shape with helpers kept the same late rows");
		is( $node->safe_psql('postgres',
				"SELECT (SELECT count(*) FROM ($bad '$a' EXCEPT ALL $bad '$b') d) "
				  . "+ (SELECT count(*) FROM ($bad '$b' EXCEPT ALL $bad '$a') d), "
				  . "(SELECT count(*) FROM streaming.dead_letters WHERE stream = '$b')"),
			'0|1', "$what: $shape with helpers kept the same dead letters")
		  if $first;
		check_offsets($node, $b, $kafka, $topic, "$what: $shape with helpers");
		check_progress($node, $b, $count, "$what: $shape with helpers");
		is(stream_row($node, $b)->{status}, 'running', "$what: $b is running");
	}
	is( $node->safe_psql('postgres', "SELECT count(*), count(DISTINCT order_id) FROM dedup_2"),
		$orders->count . '|' . $orders->count, "$what: dedup kept every order once");
	ok( $node->safe_psql('postgres',
			"SELECT count(*) FROM streaming.late_rows WHERE stream IN ('late_2', 'session_2')") > 0,
		"$what: the windows kept late rows")
	  if $first;
	return;
}

process_all();
for my $shape (@pairs)
{
	is(scalar(helper_pids($node, "${shape}_2")), 2, "$shape: the stream has two helpers");
	is(scalar(helper_pids($node, "${shape}_0")), 0, "$shape: its twin has none");
}
check_pairs('first pass', 12_001, 1);

# kill -9 of a helper of the dedup stream while a backlog waits: the
# records are all there before its worker plans its next batch, the
# helper killed before it does (hold_streams).  Every stream is held, so
# that each pair plans the same batches (which rows are late depends on
# the watermark at a batch's start).
my $hold = hold_streams($node, 'true');
my $more = $orders->take(10_000);
$kafka->produce_lines($topic, $more);
$kafka->produce_lines($topic, [ @{ $more }[ 0 .. 2_999 ] ]);
my ($victim) = helper_pids($node, 'dedup_2');
my $before = $hold->query_safe('SELECT count(*) FROM dedup_2');
ok(kill('KILL', $victim), "kill -9 of helper $victim of dedup_2");
ok($before < $orders->count, "the backlog waited ($before of " . $orders->count . ' orders read)');
eval { release_streams($hold); 1 } or note 'the holding session went with the restart';
wait_for($node,
	"SELECT count(*) = 2 AND bool_and(pid <> $victim) FROM pg_stat_activity WHERE " . helpers_of('dedup_2'),
	't', 'dedup_2 has two new helpers', 'dedup_2');
process_all();
for my $shape (@pairs)
{
	my ($a, $b) = ("${shape}_0", "${shape}_2");
	# the second pass: 13,000 records more
	is( $node->safe_psql('postgres', "SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = '$b'"),
		25_001, "$shape with helpers read every record once after the kill");
}
for my $shape (@pairs)
{
	my ($a, $b) = ("${shape}_0", "${shape}_2");
	my ($ta, $tb) = map { query_retry($node, "SELECT count(*) FROM $_") } ($a, $b);
	is($tb, $ta, "after the kill: $shape with helpers has as many rows as without");
}
my $log = slurp_file($node->logfile);
like($log, qr/streaming helper.*terminated by signal 9/, 'the postmaster saw the killed helper');

check_pairs('after the kill', 25_001);

# a helper that fails in the middle of its share (the fault point
# helper_chunk, after it sent a chunk's rows): with an error (the worker
# fails the batch and runs it again), then killed with kill -9; the fault
# is cleared once reached.  Every stream is held meanwhile, as above.
my $count = 25_001;
for my $action ('error', 'kill9')
{
	my $hold = hold_streams($node, 'true');
	my $new = $orders->take(4_000);
	$kafka->produce_lines($topic, $new);
	$kafka->produce_lines($topic, [ @{ $new }[ 0 .. 999 ] ]);
	$count += 5_000;
	my $log_start = -s $node->logfile;
	set_fault($node, "helper_chunk:$action");
	eval { release_streams($hold); 1 } or note 'the holding session went';
	$node->wait_for_log(qr/streaming fault point reached: helper_chunk/, $log_start);
	set_fault($node, undef);
	process_all();
	check_pairs("helper_chunk:$action", $count);
}
like(slurp_file($node->logfile), qr/parallel helper \d+ of stream "[^"]+"/,
	'the worker failed the batch whose helper failed');

$node->stop;
done_testing();
