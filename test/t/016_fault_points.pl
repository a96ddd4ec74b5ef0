# 016_fault_points.pl: a fault at every step of a batch loses and doubles
# nothing (issue 12, item 6; SPEC 6).
#
# make test runs a build with fault points (src/fault.h): a superuser's
# streaming.test_fault = 'point:action' makes the worker log "streaming
# fault point reached: <point>" and act there.  For every point and each of
# kill9 (the worker SIGKILLs itself: the server restarts), error and fatal,
# a fresh stream reads the same 10,000 orders (with 3 malformed records, so
# that dead letters are written too) in batches of at most 2,500; the fault
# is cleared as soon as it was reached, and then the sink holds every order
# exactly once, the dead letters are the 3 records once each, and the
# stored offsets are the ends of the partitions.
#
# The file source's own point, mid_file (between two chunks of one file),
# the same way over 4 CSV files of 2,500 lines: every line once, every file
# read once.
#
# Then before_commit:sleep: a batch that sleeps before its commit while the
# server stops (immediate) is absent after the restart, its offsets not
# moved; and streaming.stop() gives up such a batch promptly, rolled back.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Cwd qw(abs_path);
use Time::HiRes qw(time);

my $kafka = StreamingTest::Kafka->start;
my ($topic) = $kafka->create_topic('orders_016', 4);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 10_000, poison_at => [ 100, 5_000, 9_000 ]);

# retries without a limit: a stream that errs at its fault point until the
# test has cleared it must not fail for good, however long that takes
my $node = streaming_node('main',
	conf => "streaming.retry_delay = '100ms'\nstreaming.max_retries = 1000\n");
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_settings WHERE name = 'streaming.test_fault'"),
	'1', 'the tests run a build with fault points');

sub dead_letters
{
	my ($stream) = @_;
	return query_retry($node,
		"SELECT count(*) || '/' || count(DISTINCT position) FROM streaming.dead_letters WHERE stream = '$stream'");
}

my @points = qw(after_fetch after_parse after_dead_letter after_sink_write
  before_watermark_update before_commit after_commit);
my $n = 0;
for my $point (@points)
{
	for my $action (qw(kill9 error fatal))
	{
		my $name = 'f' . ++$n;
		my $what = "$point:$action";

		create_orders_source($node, "${name}_src", $kafka, $topic,
			max_offsets_per_trigger => 2_500);
		create_orders_stream($node, $name, "${name}_src", start => 'false');
		set_fault($node, $what);
		my $log_start = -s $node->logfile;
		$node->safe_psql('postgres', "SELECT streaming.start('$name')");
		$node->wait_for_log(qr/streaming fault point reached: $point\b/, $log_start);
		set_fault($node, undef);
		query_retry($node, "SELECT streaming.process_available('$name', '120s')");
		check_sink($node, $name, $orders, $what);
		is(dead_letters($name), '3/3', "$what: the malformed records are dead letters once each");
		check_offsets($node, $name, $kafka, $topic, $what);
		$node->safe_psql('postgres',
			"SELECT streaming.drop_stream('$name', drop_sink => true); "
			  . "SELECT streaming.drop_source('${name}_src')");
	}
}

#
# mid_file: a fault between two chunks of a file
#
my $dir = abs_path(PostgreSQL::Test::Utils::tempdir());
for my $f (1 .. 4)
{
	open my $fh, '>', "$dir/.part" or die "$dir/.part: $!";
	printf $fh "%d,%d.50\n", ($f - 1) * 2_500 + $_, $_ for 1 .. 2_500;
	close $fh or die "$dir/.part: $!";
	utime(time() - 60, time() - 60, "$dir/.part") or die "utime: $!";
	rename("$dir/.part", "$dir/orders_$f.csv") or die "rename: $!";
}
for my $action (qw(kill9 error fatal))
{
	my $name = "file_$action";
	my $what = "mid_file:$action";

	$node->safe_psql('postgres',
		"SELECT streaming.create_file_source('${name}_src', '$dir', columns => 'id int, amount numeric'); "
		  . "SELECT streaming.create_stream('$name', 'SELECT id, amount, file_name, file_line FROM ${name}_src', "
		  . "start => false)");
	set_fault($node, $what);
	my $log_start = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT streaming.start('$name')");
	$node->wait_for_log(qr/streaming fault point reached: mid_file/, $log_start);
	set_fault($node, undef);
	query_retry($node, "SELECT streaming.process_available('$name', '120s')");
	is( query_retry($node,
			"SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || sum(id) || ' ' || "
			  . "count(DISTINCT (file_name, file_line)) FROM $name"),
		'10000 10000 50005000 10000', "$what: every line of every file once");
	is( query_retry($node,
			"SELECT count(*) || ' ' || count(DISTINCT file_name) FROM streaming.processed_files WHERE stream = '$name'"),
		'4 4', "$what: every file read once");
	$node->safe_psql('postgres',
		"SELECT streaming.drop_stream('$name', drop_sink => true); "
		  . "SELECT streaming.drop_source('${name}_src')");
}

#
# A batch asleep before its commit: the server stops (immediate)
#
create_orders_source($node, 'sleepy_src', $kafka, $topic);
create_orders_stream($node, 'sleepy', 'sleepy_src', start => 'false');
set_fault($node, 'before_commit:sleep:60');
my $log_start = -s $node->logfile;
$node->safe_psql('postgres', "SELECT streaming.start('sleepy')");
$node->wait_for_log(qr/streaming fault point reached: before_commit/, $log_start);
$node->stop('immediate');
$log_start = -s $node->logfile;
$node->start;
# the fault is still set: the batch, run again, sleeps before its commit
$node->wait_for_log(qr/streaming fault point reached: before_commit/, $log_start);
is( $node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM streaming.progress WHERE stream = 'sleepy') || '/' || "
		  . "(SELECT count(*) FROM streaming.positions p JOIN streaming.stream_defs s ON s.id = p.stream_id "
		  . "WHERE s.name = 'sleepy') || '/' || (SELECT count(*) FROM sleepy)"),
	'0/0/0',
	'before_commit:sleep and an immediate stop: after the restart no batch, no offset and no row of it');

# stop() gives the sleeping batch up (rolled back) instead of waiting a minute
my $t0 = time();
$node->safe_psql('postgres', "SELECT streaming.stop('sleepy')");
my $secs = time() - $t0;
note sprintf('stop() of a batch asleep before its commit: %.2f s', $secs);
cmp_ok($secs, '<', 10, 'stop() gives up a batch that cannot finish');
$node->wait_for_log(qr/stream "sleepy" stopped during a batch: the batch was rolled back/, $log_start);
is($node->safe_psql('postgres', 'SELECT count(*) FROM sleepy'), '0', 'the batch given up left nothing');

set_fault($node, undef);
$node->safe_psql('postgres', "SELECT streaming.start('sleepy')");
$node->safe_psql('postgres', "SELECT streaming.process_available('sleepy', '120s')");
check_sink($node, 'sleepy', $orders, 'after the sleep, the stop and the restart');
check_offsets($node, 'sleepy', $kafka, $topic, 'after the sleep, the stop and the restart');

$node->stop;
done_testing();
