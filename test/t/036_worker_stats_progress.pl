# 036_worker_stats_progress.pl: a running worker reports its tables'
# statistics, so autovacuum and ANALYZE see what its batches write; and a
# stream's progress keeps exactly its last streaming.progress_history
# batches, through changes of the setting, a batch rolled back and a
# crash (the worker trims only the rows since its own last committed trim).
#
# A continuous stream over a rate source runs batch after batch.  Checked:
# the sink's inserts and the progress table's deletes appear in
# pg_stat_all_tables while the worker that made them still runs (before
# the fix they appeared only when it exited), and autovacuum vacuums
# streaming.batches and analyzes the sink while it runs; with
# progress_history 20, then 5, then 12, the stream's progress rows are
# exactly the last that many batches, also after a batch that failed at
# its commit (its trim rolled back) and after kill -9 of the worker.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $node = streaming_node('main',
	conf => "autovacuum_naptime = 1\nstreaming.progress_history = 20\n");
$node->safe_psql('postgres',
	"SELECT streaming.create_rate_source('r', 2000); "
	  . "SELECT streaming.create_stream('st', 'SELECT value FROM r', "
	  . "trigger => 'continuous', start => true)");
my $pid = query_retry($node,
	"SELECT worker_pid FROM streaming.streams WHERE name = 'st' AND worker_pid IS NOT NULL");

# the statistics of a worker that is still running
wait_for($node,
	"SELECT n_tup_ins > 0 FROM pg_stat_all_tables WHERE relid = 'st'::regclass",
	't', "the sink's inserts are in pg_stat_all_tables", 'st');
wait_for($node,
	"SELECT n_tup_del > 0 FROM pg_stat_all_tables WHERE relid = 'streaming.batches'::regclass",
	't', "the progress trim's deletes are in pg_stat_all_tables", 'st');
wait_for($node,
	"SELECT autovacuum_count > 0 FROM pg_stat_all_tables WHERE relid = 'streaming.batches'::regclass",
	't', 'autovacuum vacuumed streaming.batches', 'st');
wait_for($node,
	"SELECT autoanalyze_count > 0 FROM pg_stat_all_tables WHERE relid = 'st'::regclass",
	't', 'autovacuum analyzed the sink', 'st');
is(query_retry($node, "SELECT worker_pid FROM streaming.streams WHERE name = 'st'"),
	$pid, 'all while the same worker runs');

# the stream's progress rows: exactly the last $n batches, in one snapshot
sub progress_is_last
{
	my ($n, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $from = query_retry($node,
		"SELECT coalesce(max(batch_id), 0) FROM streaming.progress WHERE stream = 'st'");
	wait_for($node,
		"SELECT max(batch_id) >= $from + 3 * $n AND count(*) = $n AND min(batch_id) = max(batch_id) - $n + 1 "
		  . "FROM streaming.progress WHERE stream = 'st'",
		't', "progress holds the last $n batches ($what)", 'st');
	is( query_retry($node,
			"SELECT count(*) FROM streaming.batches b JOIN streaming.stream_defs s ON s.id = b.stream_id "
			  . "WHERE s.name = 'st' AND b.batch_id <= s.last_batch_id - $n"),
		'0', "no older batch is left ($what)");
	return;
}

progress_is_last(20, 'progress_history 20');

sub set_history
{
	my ($n) = @_;
	query_retry($node,
		"ALTER SYSTEM SET streaming.progress_history = $n; SELECT pg_reload_conf()");
	return;
}
set_history(5);
progress_is_last(5, 'lowered to 5');
set_history(12);
progress_is_last(12, 'raised to 12');

# a batch that fails at its commit: its trim is rolled back with it
my $log_start = -s $node->logfile;
set_fault($node, 'before_commit:error');
$node->wait_for_log(qr/streaming fault point reached: before_commit/, $log_start);
set_fault($node, undef);
progress_is_last(12, 'after a batch that failed before its commit');

# kill -9 of the worker (the server restarts every backend)
$pid = query_retry($node, "SELECT worker_pid FROM streaming.streams WHERE name = 'st'");
kill 'KILL', $pid;
wait_for($node,
	"SELECT worker_pid IS NOT NULL AND worker_pid <> $pid FROM streaming.streams WHERE name = 'st'",
	't', 'a new worker runs the stream after kill -9', 'st');
progress_is_last(12, 'after kill -9 of the worker');

# run_batch in a session, after the worker: its first trim deletes it all
$node->safe_psql('postgres', "SELECT streaming.stop('st')");
set_history(3);
$node->safe_psql('postgres', 'SELECT streaming.run_batch(\'st\')') for 1 .. 2;
is( $node->safe_psql('postgres',
		"SELECT count(*) = 3 AND min(batch_id) = max(batch_id) - 2 FROM streaming.progress WHERE stream = 'st'"),
	't', 'run_batch after the worker keeps the last 3 batches');

$node->stop;
done_testing();
