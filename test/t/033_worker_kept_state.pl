# 033_worker_kept_state.pl: what a stream's worker keeps from batch to
# batch instead of reading it again (its stream's positions, the analysis
# of a simple query) is never stale (issue 21 item 4).
#
# A continuous stream reads a rate source through a function named without
# its schema, found on the stream's search_path (a, b): first b.tag, then
# a.tag once it is created (the analysis the worker kept must be forgotten
# when a function appears), then b.tag again once a.tag is dropped.  The
# worker is stopped and started, and its batches run into a fault point
# that rolls them back: every value reaches the sink exactly once (the
# positions it kept are the ones it committed, never the rolled-back ones).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $node = streaming_node('main',
	conf => "streaming.progress_history = 100000\nstreaming.retry_delay = '100ms'\n"
	  . "streaming.max_retries = 1000\n");
$node->safe_psql(
	'postgres', q{
CREATE SCHEMA a;
CREATE SCHEMA b;
CREATE FUNCTION b.tag(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'b'$$;
SET search_path = a, b, public;
SELECT streaming.create_rate_source('r', 500, num_partitions => 3);
SELECT streaming.create_stream('kept', 'SELECT value, tag(value) AS tag FROM r',
    trigger => 'continuous');
});

# no_gap_no_repeat(WHAT): the sink holds the values 0 to n - 1, each once
sub no_gap_no_repeat
{
	my ($what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($n, $distinct, $min, $max) = split /\|/,
	  $node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT value), min(value), max(value) FROM a.kept');
	ok($n > 0, "$what: the sink has rows ($n)");
	is("$distinct|$min|$max", "$n|0|" . ($n - 1),
		"$what: values 0 to n - 1, each once (no gap, no repeat)");
	is( $node->safe_psql('postgres',
			q{SELECT (SELECT coalesce(sum(num_input_rows), 0) FROM streaming.progress WHERE stream = 'kept')
			       = (SELECT count(*) FROM a.kept)}),
		't', "$what: the committed batches read every value once");
}

wait_for($node, "SELECT count(*) > 0 FROM a.kept WHERE tag = 'b'",
	't', 'the batches call b.tag (the first on the search_path that has one)', 'kept');
my $before = $node->safe_psql('postgres', 'SELECT max(value) FROM a.kept');

$node->safe_psql('postgres',
	q{CREATE FUNCTION a.tag(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'a'$$});
wait_for($node, "SELECT count(*) > 0 FROM a.kept WHERE tag = 'a'",
	't', 'a function created earlier on the search_path is called by the next batches', 'kept');
is( $node->safe_psql('postgres', "SELECT count(*) FROM a.kept WHERE tag = 'a' AND value <= $before"),
	'0', 'no value read before it existed went through it');

my $with_a = $node->safe_psql('postgres', 'SELECT max(value) FROM a.kept');
$node->safe_psql('postgres', 'DROP FUNCTION a.tag(bigint)');
wait_for($node, "SELECT count(*) > 0 FROM a.kept WHERE tag = 'b' AND value > $with_a",
	't', 'once it is dropped, the batches call b.tag again', 'kept');

# its batches roll back at the fault point (after writing their positions), then go on
my $log_start = -s $node->logfile;
set_fault($node, 'before_commit:error');
$node->wait_for_log(qr/streaming fault point reached: before_commit\b/, $log_start);
set_fault($node, undef);
my $batches = $node->safe_psql('postgres',
	"SELECT coalesce(max(batch_id), 0) FROM streaming.progress WHERE stream = 'kept'");
wait_for($node,
	"SELECT coalesce(max(batch_id), 0) > $batches + 20 FROM streaming.progress WHERE stream = 'kept'",
	't', 'batches commit again after the rolled-back ones', 'kept');

$node->safe_psql('postgres', "SELECT streaming.stop('kept')");
no_gap_no_repeat('stopped');
$node->safe_psql('postgres', "SELECT streaming.start('kept')");
my $n = $node->safe_psql('postgres', 'SELECT count(*) FROM a.kept');
wait_for($node, "SELECT count(*) > $n + 100 FROM a.kept",
	't', 'started again, it goes on from its stored positions', 'kept');
$node->safe_psql('postgres', "SELECT streaming.stop('kept')");
no_gap_no_repeat('stopped again');
is($node->safe_psql('postgres', "SELECT count(*) FROM a.kept WHERE tag IS DISTINCT FROM 'b' AND tag <> 'a'"),
	'0', 'every row was tagged by one of the functions');

$node->stop;
done_testing();
