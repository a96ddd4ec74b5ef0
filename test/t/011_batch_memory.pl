# 011_batch_memory.pl: a batch whose groups exceed streaming.batch_memory
# merges them into the state table part-way, inside its transaction (SPEC
# 7, 6): a crash in the middle of such a batch loses all of it.
#
# The server runs with the smallest streaming.batch_memory (1MB: 512kB for a
# batch's groups, a few thousand of them).  60,000 records with 30,000
# distinct keys (every key twice, far apart) are read by one batch of a
# worker-driven update-mode stream (count, sum and avg by key), which merges
# its groups part-way many times.  The batch is held at the fault point
# after_fetch (src/fault.h: a sleep), once it has read every record and
# merged part-way, so that it cannot end before the kill whatever the
# machine's speed; then the worker is killed with SIGKILL, the postmaster
# restarts everything, the stream runs the batch again (the fault cleared),
# and at the end its sink must equal a plain GROUP BY, streaming.progress
# must show every record read once, and the killed worker must never have
# finished its batch (it did not log it).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my ($records, $keys) = (60_000, 30_000);

my $kafka = StreamingTest::Kafka->start;
my ($topic) = $kafka->create_topic('memory_011', 4);
$kafka->produce_lines($topic,
	[ map { sprintf('{"id": %d, "v": %d}', $_ % $keys, $_ % 101) } 0 .. $records - 1 ]);

my $node = streaming_node('main', conf => "streaming.batch_memory = '1MB'\n");
# the first batch waits after its fetch until it is killed
set_fault($node, 'after_fetch:sleep:600');
$node->safe_psql(
	'postgres', qq{
SELECT streaming.create_kafka_source('mem_src', '@{[ $kafka->bootstrap ]}', topics => ARRAY['$topic'],
    starting_offsets => 'earliest', columns => 'id int, v int');
SELECT streaming.create_stream('mem_update',
    'SELECT id, count(*) AS n, sum(v) AS total, avg(v::numeric) AS mean FROM mem_src GROUP BY id',
    output_mode => 'update');
});

# the first batch, held after its fetch, then SIGKILL
my $merge_re = qr/merging them into streaming\.state_\d+ part-way/;
$node->wait_for_log(qr/streaming fault point reached: after_fetch/);
# the batch asleep goes on sleeping; the worker after the crash runs it whole
set_fault($node, undef);
my $pid = stream_row($node, 'mem_update')->{worker_pid};
ok($pid, "the stream's worker ($pid) has read its batch and waits before its end");
ok(kill('KILL', $pid), "killed worker $pid in the middle of its batch");

wait_for($node,
	"SELECT status = 'running' AND worker_pid IS NOT NULL AND worker_pid <> $pid "
	  . "FROM streaming.streams WHERE name = 'mem_update'",
	't', 'the stream runs again, in a new worker', 'mem_update');
$node->safe_psql('postgres', "SELECT streaming.process_available('mem_update', '120s')");

my $log = slurp_file($node->logfile);
like($log, qr/\[$pid\] [^\n]*$merge_re/, 'the killed worker had merged part-way');
like($log, qr/\(PID $pid\) was terminated by signal 9/, 'the postmaster saw the killed worker');
unlike($log, qr/\[$pid\] [^\n]*stream "mem_update" ran batch/,
	'the killed worker never finished its batch');
my @merges = $log =~ /$merge_re/g;
ok(@merges >= 4, 'the batches merged their groups part-way (' . scalar(@merges) . ' times)');

$node->safe_psql(
	'postgres', qq{
CREATE TABLE exp_in AS
SELECT i % $keys AS id, i % 101 AS v FROM generate_series(0, $records - 1) i;
CREATE VIEW exp_update AS SELECT id, count(*) AS n, sum(v) AS total, avg(v::numeric) AS mean FROM exp_in GROUP BY id;
});
is( $node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM (TABLE mem_update EXCEPT ALL TABLE exp_update) d), "
		  . "(SELECT count(*) FROM (TABLE exp_update EXCEPT ALL TABLE mem_update) d), "
		  . "(SELECT count(*) FROM mem_update)"),
	"0|0|$keys",
	'the sink equals a plain GROUP BY over every record');
check_progress($node, 'mem_update', $records, 'mem_update');
is( $node->safe_psql('postgres',
		"SELECT num_state_rows FROM streaming.progress WHERE stream = 'mem_update' ORDER BY batch_id DESC LIMIT 1"),
	$keys, 'num_state_rows: one state row per key');

$node->stop;
done_testing();
