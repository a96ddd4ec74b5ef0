# 035_worker_memory.pl: a stream's worker keeps its memory through its
# batches.  A batch allocates in its transaction's memory, which the commit
# frees; what outlives it is the runtime's, the sources' and the sink's own.
# A continuous stream over a rate source runs a batch per few values; the
# worker's memory (pg_log_backend_memory_contexts: the "Grand total" line,
# bytes used) after 200 batches and after 1,500 more must not have grown by
# more than 4 MB (when batches ran in the worker's own memory, each left
# ~37 kB there: 55 MB over these batches).  Every wait is for a condition
# (batch ids, log lines), never a fixed sleep.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $node = streaming_node('main');
$node->safe_psql('postgres',
	"SELECT streaming.create_rate_source('r', 5000); "
	  . "SELECT streaming.create_stream('mem', 'SELECT value FROM r', "
	  . "trigger => 'continuous', start => true)");

sub last_batch
{
	return query_retry($node,
		"SELECT coalesce(max(batch_id), -1) FROM streaming.progress WHERE stream = 'mem'");
}

# the worker's memory in use, from its own report in the server log
sub worker_memory
{
	my $pid = query_retry($node, "SELECT worker_pid FROM streaming.streams WHERE name = 'mem'");
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $used;
	while (!defined $used && time() < $deadline)
	{
		my $log = substr(slurp_file($node->logfile), $offset);
		$used = $1 if $log =~ /\[$pid\] .*Grand total: \d+ bytes in \d+ blocks; \d+ free \(\d+ chunks\); (\d+) used/;
		usleep(100_000) unless defined $used;
	}
	ok(defined $used, "the worker ($pid) reported its memory");
	return $used // 0;
}

wait_for($node, "SELECT coalesce(max(batch_id), -1) >= 200 FROM streaming.progress WHERE stream = 'mem'",
	't', 'the continuous stream ran 200 batches', 'mem');
my $before = worker_memory();
my $from = last_batch();
wait_for($node,
	"SELECT coalesce(max(batch_id), -1) >= $from + 1500 FROM streaming.progress WHERE stream = 'mem'",
	't', 'the continuous stream ran 1,500 more batches', 'mem');
my $after = worker_memory();
cmp_ok($after - $before, '<', 4 * 1024 * 1024,
	"the worker's memory did not grow with its batches ($before then $after bytes used)");
is( $node->safe_psql('postgres',
		"SELECT status || ':' || coalesce(last_error, '') FROM streaming.streams WHERE name = 'mem'"),
	'running:', 'the stream runs, without an error');

$node->stop;
done_testing();
