# 034_rate_file_helpers.pl: parallel helpers for the rate source and for
# dedup_keys over file and rate sources (issue 21), chosen automatically
# (parallel_workers NULL), kill -9 of a helper, and the fault point
# helper_chunk with an error and with kill -9.
#
# The rate source: a stateless stream (3 partitions, a batch every 250 ms,
# so that a batch has more than one chunk of values to share: a batch of
# one gets no helpers) and a dedup stream
# (1 partition, dedup_keys on the timestamp: 2 values to a microsecond at
# 2,000,000 values a second, so only the first of each pair is kept, which
# holds only if the worker takes the helpers' shares in the source's
# order), each with parallel_workers => 2.  An automatic rate stream takes
# no helpers (rate values need no parsing: helpers only add their
# hand-over).  A helper of the
# dedup stream is killed with kill -9 (the postmaster restarts every
# process); afterwards both go on, and once stopped each sink holds
# exactly the values the stored positions say were read: every value once
# (stateless), value 0 and every odd value (dedup), nothing lost or
# doubled.
#
# The file source: dedup_keys over CSV files whose keys repeat across
# files, at most 4 files a batch, automatic helpers; the first row of each
# key in file order must be the one kept.  While more files wait (the
# stream held between two of its batches), a helper is killed with kill
# -9; afterwards every file was read once, and the sink holds exactly the
# first row of each key.  Every wait is for a condition, never a fixed
# sleep.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $node = streaming_node('main',
	conf => "streaming.retry_delay = '100ms'\nstreaming.max_retries = 1000\n");

sub helpers
{
	my ($stream) = @_;
	return query_retry($node, "SELECT count(*) FROM pg_stat_activity WHERE " . helpers_of($stream));
}

# ---- the rate source ----------------------------------------------------

$node->safe_psql('postgres',
	"SELECT streaming.create_rate_source('r3', 50000, num_partitions => 3); "
	  . "SELECT streaming.create_rate_source('r1', 2000000); "
	  . "SELECT streaming.create_stream('rate_plain', 'SELECT value, partition FROM r3', "
	  . "trigger => '250 milliseconds', parallel_workers => 2); "
	  . "SELECT streaming.create_stream('rate_dedup', 'SELECT value, partition FROM r1', "
	  . "dedup_keys => ARRAY['timestamp'], parallel_workers => 2); "
	  . "SELECT streaming.create_stream('rate_auto', 'SELECT value FROM r3')");
for my $s ('rate_plain', 'rate_dedup')
{
	wait_for($node, "SELECT count(*) = 2 FROM pg_stat_activity WHERE " . helpers_of($s),
		't', "$s: two helpers for a rate source", $s);
}

# the values read so far: the sum of the committed offsets of the partitions
sub committed
{
	my ($stream) = @_;
	return query_retry($node,
		"SELECT coalesce(sum(committed_offset), 0) FROM streaming.source_lag WHERE stream = '$stream'");
}

# an automatic rate stream: batches of many chunks, and still no helper
wait_for($node,
	"SELECT coalesce(sum(committed_offset), 0) > 100000 FROM streaming.source_lag WHERE stream = 'rate_auto'",
	't', 'rate_auto read values', 'rate_auto');
is(helpers('rate_auto'), '0', 'an automatic rate stream runs without helpers');
$node->safe_psql('postgres', "SELECT streaming.stop('rate_auto')");

# rate_plain: every value below the committed end once; rate_dedup: value
# 0 and the odd values below it (the first of each microsecond)
sub check_rate
{
	my ($what) = @_;
	my $n = committed('rate_plain');
	ok($n > 0, "$what: rate_plain read values ($n)");
	is( $node->safe_psql('postgres',
			"SELECT count(*), count(DISTINCT value), coalesce(max(value), -1), "
			  . "bool_and(partition = value % 3) FROM rate_plain"),
		"$n|$n|" . ($n - 1) . '|t',
		"$what: rate_plain holds every value read once");
	my $d = committed('rate_dedup');
	ok($d > 0, "$what: rate_dedup read values ($d)");
	is( $node->safe_psql('postgres',
			"SELECT count(*), count(DISTINCT value), bool_and(value = 0 OR value % 2 = 1), "
			  . "bool_and(value < $d) FROM rate_dedup"),
		(1 + int($d / 2)) . '|' . (1 + int($d / 2)) . '|t|t',
		"$what: rate_dedup kept the first value of each timestamp, once");
	return;
}

# a few batches with helpers, then kill -9 of one of rate_dedup's
my $seen = committed('rate_dedup');
wait_for($node,
	"SELECT coalesce(sum(committed_offset), 0) > $seen + 300000 FROM streaming.source_lag WHERE stream = 'rate_dedup'",
	't', 'rate_dedup reads with its helpers', 'rate_dedup');
my ($victim) = helper_pids($node, 'rate_dedup');
my $log_start = -s $node->logfile;
ok(kill('KILL', $victim), "kill -9 of helper $victim of rate_dedup");
$node->wait_for_log(qr/streaming helper.*terminated by signal 9/, $log_start);
wait_for($node,
	"SELECT count(*) BETWEEN 1 AND 2 AND bool_and(pid <> $victim) FROM pg_stat_activity WHERE "
	  . helpers_of('rate_dedup'),
	't', 'rate_dedup has new helpers', 'rate_dedup');
# both rate streams commit more values (after WHAT)
sub rate_streams_go_on
{
	my ($what) = @_;
	my ($dedup, $plain) = (committed('rate_dedup'), committed('rate_plain'));
	wait_for($node,
		"SELECT (SELECT sum(committed_offset) FROM streaming.source_lag WHERE stream = 'rate_dedup') > $dedup + 200000 "
		  . "AND (SELECT sum(committed_offset) FROM streaming.source_lag WHERE stream = 'rate_plain') > $plain + 100000",
		't', "both rate streams go on after $what", 'rate_dedup');
	return;
}
rate_streams_go_on('the kill');
# the fault point helper_chunk (a helper fails after sending a chunk's
# rows): with an error (the worker fails the batch and retries it), then
# with kill -9 (the postmaster restarts every process); cleared once reached
for my $action ('error', 'kill9')
{
	$log_start = -s $node->logfile;
	set_fault($node, "helper_chunk:$action");
	$node->wait_for_log(qr/streaming fault point reached: helper_chunk/, $log_start);
	set_fault($node, undef);
	rate_streams_go_on("helper_chunk:$action");
}
query_retry($node, "SELECT streaming.stop('rate_plain'); SELECT streaming.stop('rate_dedup')");
wait_for($node,
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('streaming worker', 'streaming helper')",
	'0', 'the rate streams stopped');
check_rate('after the kill');
is( $node->safe_psql('postgres',
		"SELECT string_agg(status || ':' || coalesce(last_error, ''), ',' ORDER BY name) "
		  . "FROM streaming.streams WHERE name LIKE 'rate\\_%'"),
	'stopped:,stopped:,stopped:', 'the rate streams stopped without an error');

# ---- dedup_keys over a file source ----------------------------------------

my $dir = PostgreSQL::Test::Utils::tempdir;
my $next_id = 1;

# files NAMES, 500 lines each (id, k = id % 1700, v), settled: mtimes an
# hour ago, one second apart in name order (the order a batch takes them)
sub put_files
{
	my ($base, @names) = @_;
	my $i = 0;
	for my $name (@names)
	{
		my $part = "$dir/.$name.part";
		open(my $fh, '>', $part) or die "$part: $!";
		for (1 .. 500)
		{
			my $id = $next_id++;
			print $fh "$id," . ($id % 1700) . ",v$id\n";
		}
		close($fh) or die "$part: $!";
		my $t = $base + $i++;
		utime($t, $t, $part) or die "$part: $!";
		rename($part, "$dir/$name") or die "$name: $!";
	}
	return;
}

put_files(time() - 7200, map { sprintf('a%02d.csv', $_) } 1 .. 8);
$node->safe_psql('postgres',
	"SELECT streaming.create_file_source('files', '$dir', columns => 'id bigint, k int, v text', "
	  . "max_files_per_trigger => 4); "
	  . "SELECT streaming.create_stream('file_dedup', 'SELECT id, k, v FROM files', "
	  . "dedup_keys => ARRAY['k'])");

# the first row of each key in file order is the lowest id; every file read once
sub check_files
{
	my ($what, $nfiles) = @_;
	my $lines = $next_id - 1;
	my $keys = $lines < 1700 ? $lines : 1700;
	wait_for($node, "SELECT count(*) FROM streaming.processed_files WHERE stream = 'file_dedup'",
		$nfiles, "$what: file_dedup read the $nfiles files", 'file_dedup');
	is( $node->safe_psql('postgres',
			"SELECT count(*), count(DISTINCT k), bool_and(id = CASE WHEN k = 0 THEN 1700 ELSE k END) "
			  . "FROM file_dedup"),
		"$keys|$keys|t", "$what: file_dedup kept the first row of each key in file order");
	is( $node->safe_psql('postgres',
			"SELECT sum(num_input_rows), sum(num_output_rows) + sum(num_dedup_rows) "
			  . "FROM streaming.progress WHERE stream = 'file_dedup'"),
		"$lines|$lines", "$what: every line read once");
	return;
}

check_files('first files', 8);
is(helpers('file_dedup'), '2', 'file_dedup has two automatic helpers');

# kill -9 of a helper while more files wait (the stream held between batches)
my $hold = hold_streams($node, "name = 'file_dedup'");
put_files(time() - 3600, map { sprintf('b%02d.csv', $_) } 1 .. 8);
($victim) = helper_pids($node, 'file_dedup');
$log_start = -s $node->logfile;
ok(kill('KILL', $victim), "kill -9 of helper $victim of file_dedup");
eval { release_streams($hold); 1 } or note 'the holding session went with the restart';
$node->wait_for_log(qr/streaming helper.*terminated by signal 9/, $log_start);
check_files('after the kill', 16);
wait_for($node,
	"SELECT count(*) = 2 AND bool_and(pid <> $victim) FROM pg_stat_activity WHERE " . helpers_of('file_dedup'),
	't', 'file_dedup has two new helpers', 'file_dedup');

# helper_chunk with an error, then with kill -9, while more files wait
my $round = 0;
for my $action ('error', 'kill9')
{
	$round++;
	$hold = hold_streams($node, "name = 'file_dedup'");
	put_files(time() - 3000 + 100 * $round, map { sprintf("c$round%02d.csv", $_) } 1 .. 8);
	$log_start = -s $node->logfile;
	set_fault($node, "helper_chunk:$action");
	eval { release_streams($hold); 1 } or note 'the holding session went';
	$node->wait_for_log(qr/streaming fault point reached: helper_chunk/, $log_start);
	set_fault($node, undef);
	check_files("after helper_chunk:$action", 16 + 8 * $round);
}
is(stream_row($node, 'file_dedup')->{status}, 'running', 'file_dedup is running');

$node->stop;
done_testing();
