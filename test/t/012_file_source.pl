# 012_file_source.pl: the file source under workers and crashes (SPEC 2.2, 6).
#
# 40 CSV files of 5,000 orders each arrive in rounds (each written
# elsewhere and renamed in, its mtime a few seconds back, as a copy that
# keeps mtimes makes it); two streams read the source in batches of at
# most two files: a stateless one that keeps every line with its file and
# line, and a windowed aggregate in update mode.  clean_source archives
# the files.  At random moments (seeded) a worker is killed with SIGKILL
# (the postmaster then restarts every process) or the server is stopped
# with "immediate" and started again, while files are waiting.  In the end:
# every line is in the stateless sink exactly once; each file was read
# once, in one batch, by each stream; every file was archived once (after
# both streams read it) and the directory is empty; the aggregate equals
# plain GROUP BY over the same files loaded by COPY.
#
# Then: a file written slowly in place is read only once it is complete; a
# rolled-back run_batch leaves its files in place, to be read later; pg_dump
# keeps a file stream's positions (the restored stream reads no file again).
#
# STREAMING_TEST_SEED=N replays the random choices of a run.
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib $FindBin::RealBin;
use List::Util qw(shuffle);
use POSIX qw(strftime);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = test_seed();
my $nfiles = 40;
my $lines_per_file = 5_000;
my $rounds = 8;
my @kinds = shuffle(('kill_worker') x ($rounds / 2), ('immediate') x ($rounds / 2));
note "crash plan: @kinds";

my $base = abs_path(PostgreSQL::Test::Utils::tempdir());
my ($dir, $archive, $copies) = ("$base/in", "$base/archive", "$base/copies");
mkdir $_ or die "$_: $!" for ($dir, $archive, $copies);

my $node = streaming_node('main', conf => "streaming.file_settle_time = '1s'\n");

# file_name(I): the I-th file's name; orders of file I have ids
# (I - 1) * lines + 1 .. I * lines, event times one second apart from
# 2024-05-01
sub file_name { return sprintf('orders_%02d.csv', $_[0]); }

# put_file(I): write file I under a name the source ignores, then rename
# it in, its mtime five seconds back (settled); a copy stays for COPY
sub put_file
{
	my ($i) = @_;
	my $name = file_name($i);
	my $part = "$dir/.$name.part";
	open my $fh, '>', $part or die "$part: $!";
	print $fh "order_id,amount,status,event_time\n";
	for my $k (1 .. $lines_per_file)
	{
		my $id = ($i - 1) * $lines_per_file + $k;
		my $status = (qw(created paid shipped cancelled))[ $id % 4 ];
		printf $fh "%d,%d.%02d,%s,%s\n", $id, 1 + $id % 997, $id % 100, $status,
		  strftime('%Y-%m-%d %H:%M:%S+00', gmtime(1_714_521_600 + $id));
	}
	close $fh or die "$part: $!";
	system('cp', '-p', $part, "$copies/$name") == 0 or die "cp: $?";
	utime(time() - 5, time() - 5, $part) or die "utime: $!";
	rename($part, "$dir/$name") or die "rename: $!";
	return;
}

$node->safe_psql('postgres', qq{
SELECT streaming.create_file_source('orders_files', '$dir', csv_header => true, pattern => 'orders_*.csv',
    columns => 'order_id bigint, amount numeric(12,2), status text, event_time timestamptz',
    max_files_per_trigger => 2, clean_source => 'archive', archive_directory => '$archive');
SELECT streaming.create_stream('orders_lines',
    'SELECT order_id, amount, status, event_time, file_name, file_line FROM orders_files');
SELECT streaming.create_stream('orders_windows',
    \$\$SELECT streaming.window_start() AS ws, status, count(*) AS n, sum(amount) AS total
       FROM orders_files GROUP BY streaming.tumble(event_time, '10 minutes'), status\$\$,
    output_mode => 'update');
});

# rounds of five files, each struck by a crash while files wait
my $next = 1;
my $with_backlog = 0;
my $kills = 0;
for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];

	# the round's files all there before either stream plans its next
	# batch: hold the streams' catalog rows, as a batch does first thing
	my $hold = $node->background_psql('postgres');
	$hold->query_safe('BEGIN');
	$hold->query_safe(
		"SELECT count(*) FROM (SELECT FROM streaming.stream_defs WHERE name LIKE 'orders_%' FOR UPDATE) s");
	put_file($next++) for 1 .. $nfiles / $rounds;
	$hold->query_safe('COMMIT');

	# strike at a random moment while the streams work through them; what
	# they committed is read in the session already open (no delay)
	usleep(int(rand(60_000)));
	my ($before, $waiting) = split /\|/, $hold->query_safe(
		"SELECT (SELECT count(*) FROM orders_lines), 2 * ($next - 1) - count(*) "
		  . "FROM streaming.files f JOIN streaming.stream_defs d ON d.id = f.stream_id "
		  . "WHERE d.name LIKE 'orders_%'");
	$hold->quit;
	$with_backlog++ if $waiting > 0;
	if ($kind eq 'kill_worker')
	{
		my $victim = (qw(orders_lines orders_windows))[ int(rand(2)) ];
		wait_for($node,
			"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = '$victim'",
			't', "round $round: $victim has a worker", $victim);
		my $pid = stream_row($node, $victim)->{worker_pid};
		note "round $round: kill -9 of the worker of $victim ($pid), $before rows, $waiting files not read yet";
		ok(kill('KILL', $pid), "round $round: killed worker $pid");
		$kills++;
	}
	else
	{
		note "round $round: immediate stop, $before rows, $waiting files not read yet";
		$node->stop('immediate');
		$node->start;
	}
	my $produced = ($next - 1) * $lines_per_file;
	wait_for($node,
		"SELECT count(*) > $before OR count(*) >= $produced FROM orders_lines", 't',
		"round $round ($kind): the stream makes progress after the crash", 'orders_lines');
}
note "$with_backlog of $rounds crashes struck while files were not read yet";
ok($with_backlog >= 1, 'the crashes struck while the stream had files to read');

for my $stream (qw(orders_lines orders_windows))
{
	$node->safe_psql('postgres', "SELECT streaming.process_available('$stream', '180s')");
}
my $total = $nfiles * $lines_per_file;

# every line exactly once
is( $node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT (file_name, file_line)), count(DISTINCT order_id), '
		  . 'sum(order_id), sum(amount) FROM orders_lines'),
	join('|', $total, $total, $total, $total * ($total + 1) / 2,
		$node->safe_psql('postgres',
			"SELECT sum(1 + id % 997 + (id % 100) / 100.0)::numeric(20,2) FROM generate_series(1, $total) id")),
	'every line of every file is in the sink exactly once');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM orders_lines WHERE file_line <> order_id - "
		  . "((substring(file_name from 8 for 2))::int - 1) * $lines_per_file + 1"),
	'0', 'each row carries its file and 1-based line (the header is line 1)');

# each file read once, in one batch, by each stream
for my $stream (qw(orders_lines orders_windows))
{
	is( $node->safe_psql('postgres',
			"SELECT count(*), count(DISTINCT file_name), count(DISTINCT batch_id) >= 20 FROM streaming.processed_files WHERE stream = '$stream'"),
		"$nfiles|$nfiles|t", "$stream: processed_files lists every file once, in batches of at most two");
	is( $node->safe_psql('postgres',
			"SELECT count(*), count(DISTINCT f) FROM streaming.progress p, jsonb_object_keys(p.end_positions) f "
			  . "WHERE p.stream = '$stream'"),
		"$nfiles|$nfiles", "$stream: the committed batches read each file once");
	is( $node->safe_psql('postgres',
			"SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = '$stream'"),
		$total, "$stream: the batches read every line once");
}

# archived once each, after both streams read it: the directory is empty
wait_for($node,
	"SELECT count(*) FILTER (WHERE cleaned_at IS NULL) = 0 AND count(*) = 2 * $nfiles FROM streaming.files",
	't', 'every file read by both streams is recorded as cleaned', 'orders_lines');
opendir(my $dh, $dir) or die "$dir: $!";
my @left = grep { !/^\./ } readdir $dh;
closedir $dh;
is(scalar @left, 0, 'the source directory is empty (' . join(' ', @left) . ')');
opendir($dh, $archive) or die "$archive: $!";
my @archived = sort grep { !/^\./ } readdir $dh;
closedir $dh;
is_deeply(\@archived, [ map { file_name($_) } 1 .. $nfiles ],
	'each file is in the archive once, under its own name');

# the window equals plain GROUP BY over the files loaded by COPY
my $copy_sql = join "\n", map {
	"COPY orders_copy FROM '$copies/" . file_name($_) . "' (FORMAT csv, HEADER);"
} 1 .. $nfiles;
$node->safe_psql('postgres', qq{
CREATE TABLE orders_copy (order_id bigint, amount numeric(12,2), status text, event_time timestamptz);
$copy_sql
CREATE VIEW orders_windows_expected AS
SELECT date_bin('10 minutes', event_time, 'epoch') AS ws, status,
       count(*) AS n, sum(amount) AS total
FROM orders_copy GROUP BY 1, 2;
});
compare_rows($node, 'orders_windows', 'orders_windows_expected', 'ws, status, n, total',
	'the window over the file source equals plain GROUP BY');

my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /terminated by signal 9: Killed/g;
is($signal_9, $kills, 'the postmaster saw every killed worker');

#
# a file written slowly in place is never read half: its writer adds a line
# every 100 ms for 3 s; the settle time is 10 s here, so that a writer the
# machine does not run for a while (a loaded machine) still never leaves the
# file quiet that long
#
$node->safe_psql('postgres', "ALTER SYSTEM SET streaming.file_settle_time = '10s'");
$node->reload;
wait_for($node, "SELECT current_setting('streaming.file_settle_time')", '10s',
	'the settle time is 10 s for the slow writer');
$node->safe_psql('postgres', qq{
SELECT streaming.create_file_source('slow_files', '$dir', format => 'text', pattern => 'slow*');
SELECT streaming.create_stream('slow_lines', 'SELECT value, file_name, file_line FROM slow_files');
});
my $slow = "$dir/slow.txt";
open my $sfh, '>', $slow or die "$slow: $!";
$sfh->autoflush(1);
for my $k (1 .. 30)
{
	print $sfh "line $k\n";
	usleep(100_000);    # the writer's pace: a line every 100 ms
}
close $sfh or die "$slow: $!";
my $slow_size = -s $slow;
wait_for($node,
	"SELECT count(*) FROM streaming.processed_files WHERE stream = 'slow_lines'",
	'1', 'the slowly written file is read once it is quiet', 'slow_lines');
is( $node->safe_psql('postgres',
		"SELECT count(*), min(file_line), max(file_line), count(DISTINCT value) FROM slow_lines"),
	'30|1|30|30', 'the slowly written file was read whole, not half');
is( $node->safe_psql('postgres',
		"SELECT size FROM streaming.processed_files WHERE stream = 'slow_lines'"),
	$slow_size, 'processed_files has its final size');
$node->safe_psql('postgres', "ALTER SYSTEM RESET streaming.file_settle_time");
$node->reload;
wait_for($node, "SELECT current_setting('streaming.file_settle_time')", '1s',
	'the settle time is 1 s again');

#
# a rolled-back run_batch leaves its files in place; they are read later
#
$node->safe_psql('postgres', qq{
SELECT streaming.create_file_source('rb_files', '$dir', format => 'text', pattern => 'rb*',
    clean_source => 'delete');
SELECT streaming.create_stream('rb_lines', 'SELECT value, file_name FROM rb_files', start => false);
});
for my $f (qw(rb1 rb2))
{
	open my $fh, '>', "$dir/$f" or die "$dir/$f: $!";
	print $fh "$f\n";
	close $fh;
	utime(time() - 60, time() - 60, "$dir/$f");
}
is( $node->safe_psql('postgres',
		"BEGIN; SELECT streaming.run_batch('rb_lines'); SELECT count(*) FROM rb_lines; ROLLBACK;"),
	"0\n2", 'run_batch read both files, in a transaction then rolled back');
ok(-e "$dir/rb1" && -e "$dir/rb2", 'the rolled-back batch left its files in place');
is($node->safe_psql('postgres', "SELECT count(*) FROM streaming.processed_files WHERE stream = 'rb_lines'"),
	'0', 'and they are not listed as read');
is($node->safe_psql('postgres', "SELECT streaming.run_batch('rb_lines')"), '0',
	'the next run_batch reads them');
ok(-e "$dir/rb1", 'run_batch does not clean up after its commit');
$node->safe_psql('postgres', "SELECT streaming.run_batch('rb_lines')");
ok(!-e "$dir/rb1" && !-e "$dir/rb2", 'the next batch cleaned them before it planned');
is($node->safe_psql('postgres', "SELECT count(*) FROM rb_lines"), '2', 'each was read once');

#
# a file the server cannot open is held back (SPEC 4): the stream runs the
# others and names it in source_error; with only it left, the stream waits;
# once it can be opened it is read
#
my $locked_dir = "$base/locked";
mkdir $locked_dir or die "$locked_dir: $!";
$node->safe_psql('postgres', qq{
SELECT streaming.create_file_source('locked_files', '$locked_dir', format => 'text');
SELECT streaming.create_stream('locked_lines', 'SELECT value, file_name FROM locked_files');
});
for my $f ('a_open.txt', 'b_locked.txt')
{
	open my $lfh, '>', "$locked_dir/$f" or die "$locked_dir/$f: $!";
	print $lfh "$f\n";
	close $lfh;
	utime(time() - 60, time() - 60, "$locked_dir/$f");
}
chmod 0000, "$locked_dir/b_locked.txt" or die "chmod: $!";
wait_for($node, "SELECT count(*) FROM locked_lines WHERE file_name = 'a_open.txt'", '1',
	'an unopenable file: the other file is read', 'locked_lines');
wait_for($node,
	"SELECT status = 'waiting' AND source_error LIKE '%file \"b_locked.txt\" of source \"locked_files\" cannot be opened: Permission denied%' "
	  . "FROM streaming.streams WHERE name = 'locked_lines'",
	't', 'only an unopenable file left: the stream waits and source_error names the file', 'locked_lines');
open my $cfh, '>', "$locked_dir/c_open.txt" or die "$locked_dir/c_open.txt: $!";
print $cfh "c_open.txt\n";
close $cfh;
utime(time() - 60, time() - 60, "$locked_dir/c_open.txt");
wait_for($node, "SELECT count(*) FROM locked_lines WHERE file_name = 'c_open.txt'", '1',
	'an unopenable file: a new file is read meanwhile', 'locked_lines');
wait_for($node,
	"SELECT status || ':' || (source_error LIKE '%b_locked.txt%cannot be opened%')::text "
	  . "FROM streaming.streams WHERE name = 'locked_lines' AND last_batch_id IS NOT NULL",
	'waiting:true', 'an unopenable file: once the readable files are read, the stream waits again',
	'locked_lines');
chmod 0644, "$locked_dir/b_locked.txt" or die "chmod: $!";
wait_for($node,
	"SELECT count(*) = 3 AND count(*) FILTER (WHERE file_name = 'b_locked.txt') = 1 FROM locked_lines",
	't', 'the file can be opened: it is read, once', 'locked_lines');
wait_for($node,
	"SELECT status = 'running' AND source_error IS NULL FROM streaming.streams WHERE name = 'locked_lines'",
	't', 'the file can be opened: running, no source_error', 'locked_lines');
$node->safe_psql('postgres', "SELECT streaming.drop_stream('locked_lines')");

#
# pg_dump keeps a file stream's positions
#
# stopped, so that the restored streams do not run (and read the files) too
$node->safe_psql('postgres', "SELECT streaming.stop(name) FROM streaming.stream_defs WHERE enabled");
my $dump = "$base/dump.sql";
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with file streams');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('restored'), '-f', $dump ],
	'the dump restores');
is( $node->safe_psql('restored',
		"SELECT stream, file_name, size FROM streaming.processed_files WHERE stream = 'slow_lines'"),
	"slow_lines|slow.txt|$slow_size", 'the restored database knows which files were read');
is($node->safe_psql('restored', "SELECT streaming.run_batch('slow_lines')"), '',
	'the restored stream reads no file again');
open $sfh, '>', "$dir/slow2.txt" or die "$dir/slow2.txt: $!";
print $sfh "new\n";
close $sfh;
utime(time() - 60, time() - 60, "$dir/slow2.txt");
is($node->safe_psql('restored', "SELECT streaming.run_batch('slow_lines')"), '1',
	'it reads a new file');
is($node->safe_psql('restored', "SELECT count(*) FROM slow_lines"), '31', 'once');

$node->stop;
done_testing();
