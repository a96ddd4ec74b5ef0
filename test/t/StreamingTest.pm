# test/t/StreamingTest.pm: what the TAP tests of streaming share.
#
#   my $kafka = StreamingTest::Kafka->start;     # mock broker, or the real one
#   my ($topic, $nparts) = $kafka->create_topic('orders', 8);
#   my $data = StreamingTest::Orders->new;        # what was produced, in total
#   $kafka->produce_orders($topic, $data, 100_000, poison_at => [50_000]);
#   my $node = streaming_node('main');            # preloaded, started, extension created
#   create_orders_source($node, 'orders_src', $kafka, $topic);
#   ... create a stream ...
#   check_sink($node, 'orders_all', $data, 'after the first run');
#   check_offsets($node, 'orders_all', $kafka, $topic);
#   topic_table($node, $kafka, $sink_topic, 'got');  # a Kafka sink's messages
#   my $registry = StreamingTest::Registry->start;  # test/schema_registry.py, or the real one
#   $kafka->produce_avro($topic, $p, $registry, $subject, $schema, \@json_lines);
#
# Kafka: when KAFKA_BOOTSTRAP_SERVERS is set, that broker is used and every
# topic gets a unique name; otherwise each test file starts its own mock
# broker (test/mock_broker, built by make) and stops it at exit, also when
# the test dies.  Records are produced with kcat, round robin over the
# topic's partitions (one kcat per partition, explicit partition), and after
# producing every partition must still start at offset 0 and end exactly
# where the records produced so far say: the mock broker silently drops data
# beyond 5 MiB per partition, and a test that lost input proves nothing.
#
# Schema registry: when SCHEMA_REGISTRY_URL is set, that registry is used
# (and subjects get unique names, as topics do); otherwise a test file
# starts test/schema_registry.py, which it can stop and start again on the
# same port with the same schemas (down, up), and which is stopped at exit.
# Avro records are encoded by test/avro_encode.py (Apache Avro's Python
# library) and produced with kcat.
#
# Nodes: shared_preload_libraries = 'streaming' (unless preload => 0),
# streaming.naptime = '100ms', max_worker_processes = 32,
# restart_after_crash = on.  Waiting is done by polling a query (wait_for),
# never with fixed sleeps.
#
# The tests run as a user that may run initdb (postgres when root); see
# test/run-tests.sh, or by hand:
#   cd DIR-postgres-can-write &&
#   runuser -u postgres -- env PATH=/usr/lib/postgresql/15/bin:$PATH \
#     PG_REGRESS=/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress \
#     PERL5LIB=/usr/lib/postgresql/15/lib/pgxs/src/test/perl \
#     prove -v /work/main/test/t/001_worker.pl
# STREAMING_TEST_SEED=N replays the random choices of a run (002_crash.pl).
package StreamingTest;

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter 'import';
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT = qw(streaming_node create_orders_source create_orders_stream
  wait_for query_retry set_fault hold_streams rehold_streams release_streams stream_row sink_stats check_sink check_offsets check_progress
  orders_table compare_rows topic_table
  diag_stream psql_error test_seed parallel_workers_list helpers_of helper_pids
  orders_payments_sources orders_payments_join orders_payments_watermarks orders_payments_twins iso_utc sql_array
  ORDER_COLUMNS ORDER_QUERY_COLUMNS);

# The declared columns of the orders sources, and what the streams select.
use constant ORDER_COLUMNS =>
  'order_id bigint, amount numeric(12,2), status text, event_time timestamptz';
use constant ORDER_QUERY_COLUMNS =>
  'order_id, amount, status, event_time, kafka_partition, kafka_offset';

# test_seed: the seed of this run's randomness, printed so that a failing run
# can be replayed with STREAMING_TEST_SEED=N.
sub test_seed
{
	my $seed = $ENV{STREAMING_TEST_SEED};
	$seed = (time() ^ ($$ << 8)) & 0x7fffffff
	  unless defined $seed && $seed ne '';
	srand($seed);
	note "random seed: $seed (replay with STREAMING_TEST_SEED=$seed)";
	return $seed;
}

# parallel_workers_list: the parallel_workers values a test that takes them
# as a parameter runs its streams with (002_crash, 007_property): one
# stream per value, side by side.  STREAMING_TEST_PARALLEL_WORKERS="0 2" (the
# default) or e.g. "2" for parallel only.
sub parallel_workers_list
{
	my $v = $ENV{STREAMING_TEST_PARALLEL_WORKERS};
	return (0, 2) unless defined $v && $v =~ /\d/;
	return map { int } grep { /^\d+$/ } split /[\s,]+/, $v;
}

# streaming_node(NAME, preload => 1, conf => '...', install_path => DIR):
# an initialised and started node with the test settings, and the extension
# created in database postgres; install_path runs it from another
# installation (an earlier release, test/old_version.sh).
sub streaming_node
{
	my ($name, %opts) = @_;
	my $preload = exists $opts{preload} ? $opts{preload} : 1;
	my $node = PostgreSQL::Test::Cluster->new($name,
		$opts{install_path} ? (install_path => $opts{install_path}) : ());

	$node->init;
	my $conf = "max_worker_processes = 32\n"
	  . "streaming.naptime = '100ms'\n"
	  . "streaming.log_batches = on\n"
	  . "log_line_prefix = '%m [%p] %b '\n"
	  . "log_min_messages = info\n";
	$conf = "shared_preload_libraries = 'streaming'\n$conf" if $preload;
	# PostgreSQL::Test::Cluster turns this off; the crash tests need it
	$conf .= "restart_after_crash = on\n";
	# automatic helpers as on a machine of 8 CPUs, whatever this one has or
	# the tests run on (taskset): the counts the tests expect stay the same
	$conf .= "streaming.helper_cpus = 8\n" if $preload && !$opts{install_path};
	$conf .= $opts{conf} if defined $opts{conf};
	$node->append_conf('postgresql.conf', $conf);
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION streaming');
	return $node;
}

# psql_error(NODE, SQL): run SQL that must fail; returns its stderr (and
# fails the test if it succeeded).
sub psql_error
{
	my ($node, $sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql('postgres', $sql);
	isnt($ret, 0, "fails: $sql");
	return $stderr;
}

sub quote_literal
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# create_orders_source(NODE, NAME, KAFKA, TOPIC, option => value, ...):
# a Kafka source over TOPIC with the orders columns, from the earliest
# offset; further named arguments of create_kafka_source as SQL text.
sub create_orders_source
{
	my ($node, $name, $kafka, $topic, %opts) = @_;
	my $args = join '',
	  map { ", $_ => $opts{$_}" } sort keys %opts;

	$node->safe_psql('postgres',
		    "SELECT streaming.create_kafka_source("
		  . quote_literal($name) . ", "
		  . quote_literal($kafka->bootstrap)
		  . ", topics => ARRAY["
		  . quote_literal($topic) . "]"
		  . ", starting_offsets => 'earliest'"
		  . ", columns => "
		  . quote_literal(ORDER_COLUMNS)
		  . $args . ")");
	return;
}

# create_orders_stream(NODE, NAME, SOURCE, option => 'sql value', ...): a
# stateless stream that copies every order with its position into a sink
# table named like the stream.
sub create_orders_stream
{
	my ($node, $name, $source, %opts) = @_;
	my $args = join '',
	  map { ", $_ => $opts{$_}" } sort keys %opts;

	$node->safe_psql('postgres',
		    "SELECT streaming.create_stream("
		  . quote_literal($name) . ", "
		  . quote_literal("SELECT " . ORDER_QUERY_COLUMNS . " FROM $source")
		  . $args . ")");
	return;
}

# stream_row(NODE, NAME): the stream's row of streaming.streams, as a hash.
# Read right after process_available (nothing produced since), its status,
# lag, last_error and source_error are what the batch that committed the
# last positions wrote in its transaction, and stay so while the source can
# be read; read at any other moment while a worker runs, or for a stream
# with a Kafka sink (the worker shows its sink's state after delivering, in
# a transaction of its own), wait_for the state meant instead.
sub stream_row
{
	my ($node, $name) = @_;
	my $out = $node->safe_psql('postgres',
		"SELECT status, coalesce(worker_pid::text, ''), coalesce(last_batch_id::text, ''), "
		  . "coalesce(last_error, ''), coalesce(source_error, ''), coalesce(lag::text, '') "
		  . "FROM streaming.streams WHERE name = "
		  . quote_literal($name));
	return undef if $out eq '';
	my @f = split /\|/, $out, 6;
	return {
		status => $f[0],
		worker_pid => $f[1],
		last_batch_id => $f[2],
		last_error => $f[3],
		source_error => $f[4],
		lag => $f[5]
	};
}

# diag_stream(NODE, NAME): print what the stream looks like, to debug a
# failure.
sub diag_stream
{
	my ($node, $name) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT * FROM streaming.streams WHERE name = "
		  . quote_literal($name)
		  . "; SELECT * FROM streaming.source_lag WHERE stream = "
		  . quote_literal($name)
		  . "; SELECT batch_id, num_input_rows, start_positions, end_positions FROM streaming.progress "
		  . "WHERE stream = "
		  . quote_literal($name)
		  . " ORDER BY batch_id DESC LIMIT 3",
		extra_params => ['-x']);
	diag("stream $name:\n$out\n$err");
	return;
}

# wait_for(NODE, SQL, EXPECTED, WHAT, STREAM, TIMEOUT): poll until SQL
# returns EXPECTED ('t' by default), for up to TIMEOUT seconds (default
# $PostgreSQL::Test::Utils::timeout_default); success is a passed test
# named WHAT.  Errors (the server restarting, say) only mean "not yet".  A
# timeout fails the test, prints the stream STREAM (if given) and dies, so
# that later steps do not wait in vain.  (Unlike poll_query_until, this
# survives a server that is down: psql's stdin then breaks, and IPC::Run
# dies.)
sub wait_for
{
	my ($node, $sql, $expected, $what, $stream, $timeout) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $deadline = time() + ($timeout || $PostgreSQL::Test::Utils::timeout_default);
	my ($out, $err) = ('', '');

	$expected = 't' unless defined $expected;
	while (1)
	{
		my $ret;
		eval {
			($ret, $out, $err) = $node->psql('postgres', $sql);
			1;
		} or ($ret, $err) = (-1, $@);
		if ($ret == 0 && $out eq $expected)
		{
			pass($what);
			return 1;
		}
		last if time() > $deadline;
		usleep(100_000);
	}
	fail("timed out waiting: $what");
	diag("last result of $sql:\n$out\n$err");
	diag_stream($node, $stream) if defined $stream;
	die "timed out waiting: $what\n";
}

# hold_streams(NODE, WHERE): a session that holds the catalog rows of the
# streams WHERE (a condition on streaming.stream_defs) FOR UPDATE, as a
# batch locks its stream's row first thing (src/README.md, offset
# protocol): their workers wait before their next batch until
# release_streams(SESSION).
# rehold_streams(SESSION, WHERE, UNTIL): let them go, and hold them again
# once UNTIL (an SQL condition) holds, in the same session (no new
# connection in between, which a loaded machine makes slow).  UNTIL is
# asked with the rows held, so it still holds when this returns (no batch
# commits after it was seen); while it does not, the rows are let go and
# asked for again every 10 ms (a batch in flight is waited for by the lock
# itself).
sub hold_streams
{
	my ($node, $where) = @_;
	# the session's own timeout after rehold's, which says what it waited for
	my $hold = $node->background_psql('postgres',
		timeout => 2 * $PostgreSQL::Test::Utils::timeout_default);

	$hold->query_safe("BEGIN; DO \$\$ BEGIN PERFORM FROM streaming.stream_defs WHERE $where FOR UPDATE; END \$\$");
	return $hold;
}

sub rehold_streams
{
	my ($hold, $where, $until) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;

	$hold->query_safe('COMMIT');
	while (1)
	{
		my $holds = $hold->query_safe(
			"BEGIN; DO \$\$ BEGIN PERFORM FROM streaming.stream_defs WHERE $where FOR UPDATE; END \$\$; "
			  . "SELECT ($until)::text");
		return if $holds eq 'true';
		die "timed out waiting for: $until\n" if time() > $deadline;
		$hold->query_safe('COMMIT');
		usleep(10_000);
	}
}

sub release_streams
{
	my ($hold) = @_;
	$hold->query_safe('COMMIT');
	$hold->quit;
	return;
}

# set_fault(NODE, VALUE): streaming.test_fault (src/fault.h, the test
# build's fault points) for the whole server, or cleared when VALUE is
# undef; returns once a new session sees it: the postmaster has read it,
# so every process it starts from then on (a worker, the processes after
# a crash) has it.  A server that is restarting is waited for.
sub set_fault
{
	my ($node, $value) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $sql = defined $value
	  ? "ALTER SYSTEM SET streaming.test_fault = " . quote_literal($value)
	  : 'ALTER SYSTEM RESET streaming.test_fault';

	query_retry($node, "$sql; SELECT pg_reload_conf()");
	wait_for($node, "SELECT current_setting('streaming.test_fault')",
		$value // '', 'streaming.test_fault is ' . ($value // 'cleared'));
	return;
}

# orders_payments_join(JOIN): the stream-stream join tests' query over
# orders_payments_sources, JOIN being 'JOIN' or 'LEFT JOIN' (what
# paid_expected and orders_left_expected give), and
# orders_payments_watermarks(): its watermarks argument, a quoted literal.
sub orders_payments_join
{
	my ($join) = @_;
	return "SELECT o.order_id, o.amount, p.payment_id, p.payment_time
	  FROM orders_src o $join payments_src p
	    ON p.order_id = o.order_id
	   AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes'";
}

sub orders_payments_watermarks
{
	return q{'{"o": {"event_time": "order_time", "delay": "1 hour"},
	  "p": {"event_time": "payment_time", "delay": "1 hour"}}'};
}

# orders_payments_twins(NODE): over orders_payments_sources, the inner join
# (paid), the left join (orders_left) and a self-join of the orders (self),
# each as a stream with parallel_workers 2 (name_2) and one with none
# (name_0); returns the shapes, the streams and each stream's expected
# view (paid_expected, orders_left_expected, self_expected).
sub orders_payments_twins
{
	my ($node) = @_;
	my $self_join = q{SELECT a.order_id AS a_id, b.order_id AS b_id, b.order_time - a.order_time AS gap
	    FROM %s a JOIN %s b
	      ON b.order_id = a.order_id + 1 AND b.order_time BETWEEN a.order_time AND a.order_time + interval '10 seconds'};
	$node->safe_psql('postgres', 'CREATE VIEW self_expected AS ' . sprintf($self_join, 'orders_all', 'orders_all'));
	my $op = orders_payments_watermarks();
	my $ab = q{'{"a": {"event_time": "order_time", "delay": "1 hour"},
	             "b": {"event_time": "order_time", "delay": "1 hour"}}'};
	my %shapes = (
		paid => [ orders_payments_join('JOIN'), $op ],
		orders_left => [ orders_payments_join('LEFT JOIN'), $op ],
		self => [ sprintf($self_join, 'orders_src', 'orders_src'), $ab ],);
	my @shapes = sort keys %shapes;
	my (@streams, %expected);
	for my $shape (@shapes)
	{
		my ($query, $wm) = @{ $shapes{$shape} };
		for my $w (0, 2)
		{
			$node->safe_psql('postgres',
				"SELECT streaming.create_stream('${shape}_$w', \$\$$query\$\$, watermarks => $wm, parallel_workers => $w)");
			push @streams, "${shape}_$w";
			$expected{"${shape}_$w"} = "${shape}_expected";
		}
	}
	return (\@shapes, \@streams, \%expected);
}

# orders_payments_sources(NODE, KAFKA, ORDERS_TOPIC, PAYMENTS_TOPIC, CAP): the
# stream-stream join tests' inputs: Kafka sources orders_src and payments_src
# (max_offsets_per_trigger CAP), the same records as jsonb in tables
# orders_in and payments_in, and views of the expected inner and left joins
# (paid_expected, orders_left_expected: a payment 0-30 minutes after its order).
sub orders_payments_sources
{
	my ($node, $kafka, $orders_topic, $payments_topic, $cap) = @_;
	$node->safe_psql('postgres', q{
CREATE TABLE orders_in (doc jsonb);
CREATE TABLE payments_in (doc jsonb);
CREATE VIEW orders_all AS
SELECT (doc->>'order_id')::bigint AS order_id, (doc->>'amount')::numeric(12,2) AS amount,
       (doc->>'order_time')::timestamptz AS order_time FROM orders_in;
CREATE VIEW payments_all AS
SELECT (doc->>'payment_id')::bigint AS payment_id, (doc->>'order_id')::bigint AS order_id,
       (doc->>'payment_time')::timestamptz AS payment_time FROM payments_in;
CREATE VIEW paid_expected AS
SELECT o.order_id, o.amount, p.payment_id, p.payment_time FROM orders_all o JOIN payments_all p
  ON p.order_id = o.order_id AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes';
CREATE VIEW orders_left_expected AS
SELECT o.order_id, o.amount, p.payment_id, p.payment_time FROM orders_all o LEFT JOIN payments_all p
  ON p.order_id = o.order_id AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes';
});
	for my $s ([ 'orders_src', $orders_topic, 'order_id bigint, amount numeric(12,2), order_time timestamptz' ],
		[ 'payments_src', $payments_topic, 'payment_id bigint, order_id bigint, payment_time timestamptz' ])
	{
		$node->safe_psql('postgres',
			"SELECT streaming.create_kafka_source('$s->[0]', "
			  . quote_literal($kafka->bootstrap)
			  . ", topics => ARRAY[" . quote_literal($s->[1]) . "], starting_offsets => 'earliest', "
			  . "columns => '$s->[2]', max_offsets_per_trigger => $cap)");
	}
	return;
}

# iso_utc(EPOCH): the time as timestamptz text in UTC, to the second.
sub iso_utc
{
	my ($epoch) = @_;
	my @t = gmtime($epoch);
	return sprintf('%04d-%02d-%02d %02d:%02d:%02d+00', $t[5] + 1900, $t[4] + 1, @t[ 3, 2, 1, 0 ]);
}

# sql_array(ITEMS): an SQL ARRAY of the strings, quoted.
sub sql_array
{
	my ($items) = @_;
	return 'ARRAY[' . join(',', map { quote_literal($_) } @$items) . ']';
}

# helpers_of: the condition on pg_stat_activity for a stream's parallel
# helpers (application_name 'streaming helper I of stream ID').
sub helpers_of
{
	my ($stream) = @_;
	return "backend_type = 'streaming helper' AND application_name LIKE '% of stream ' || "
	  . "(SELECT id FROM streaming.stream_defs WHERE name = '$stream')";
}

# helper_pids: the pids of a stream's parallel helpers, in order.
sub helper_pids
{
	my ($node, $stream) = @_;
	return split /\n/, query_retry($node,
		"SELECT pid FROM pg_stat_activity WHERE " . helpers_of($stream) . " ORDER BY pid");
}

# query_retry(NODE, SQL): the output of SQL, retried while it fails (the
# server restarting after a crash, say) for up to
# $PostgreSQL::Test::Utils::timeout_default seconds.
sub query_retry
{
	my ($node, $sql) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my ($ret, $out, $err);

	while (1)
	{
		eval {
			($ret, $out, $err) = $node->psql('postgres', $sql);
			1;
		} or ($ret, $err) = (-1, $@);
		return $out if $ret == 0;
		die "query_retry: $sql keeps failing: $err\n" if time() > $deadline;
		usleep(100_000);
	}
}

# sink_stats(NODE, TABLE): "count|sum(amount)|sum(order_id)|distinct
# positions|distinct order ids|md5 of the ordered order ids".
sub sink_stats
{
	my ($node, $table) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*), coalesce(sum(amount), 0.00), coalesce(sum(order_id), 0), "
		  . "count(DISTINCT (kafka_partition, kafka_offset)), count(DISTINCT order_id), "
		  . "coalesce(md5(string_agg(order_id::text, ',' ORDER BY order_id)), '') "
		  . "FROM $table");
}

# check_sink(NODE, TABLE, ORDERS, WHAT): the sink holds every produced
# order exactly once.
sub check_sink
{
	my ($node, $table, $orders, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	return is(sink_stats($node, $table), $orders->expected_stats,
		"$what: count, sum(amount), sum(order_id), distinct positions, distinct orders and md5 match what was produced"
	);
}

# check_offsets(NODE, STREAM, KAFKA, TOPIC, WHAT): the stream's stored
# positions are the high watermark of every partition.
sub check_offsets
{
	my ($node, $stream, $kafka, $topic, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $wm = $kafka->watermarks($topic);
	my $expected = join "\n",
	  map { "$_|$wm->{$_}[1]" }
	  grep { $wm->{$_}[1] > 0 } sort { $a <=> $b } keys %$wm;
	my $got = $node->safe_psql('postgres',
		"SELECT p.part_no, p.position FROM streaming.positions p "
		  . "JOIN streaming.stream_defs s ON s.id = p.stream_id "
		  . "WHERE s.name = "
		  . quote_literal($stream)
		  . " AND p.part = "
		  . quote_literal($topic)
		  . " AND (p.position > 0) ORDER BY 1");
	return is($got, $expected,
		"$what: streaming.positions holds the high watermark of every partition");
}

# check_progress(NODE, STREAM, COUNT, WHAT): the committed batches in
# streaming.progress read COUNT records in all, and each batch starts where
# the one before it ended.
sub check_progress
{
	my ($node, $stream, $count, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $q = quote_literal($stream);

	is( $node->safe_psql('postgres',
			"SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = $q"),
		$count,
		"$what: the batches in streaming.progress read every record once");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM (SELECT batch_id, start_positions, "
			  . "lag(end_positions) OVER (ORDER BY batch_id) AS prev_end, "
			  . "lag(batch_id) OVER (ORDER BY batch_id) AS prev_id "
			  . "FROM streaming.progress WHERE stream = $q) b "
			  . "WHERE prev_id IS NOT NULL "
			  . "AND (prev_id <> batch_id - 1 OR start_positions IS DISTINCT FROM prev_end)"),
		0,
		"$what: batch ids are consecutive and each batch starts where the previous one ended"
	);
	return;
}

# orders_table(NODE, TABLE, LINES): a new table TABLE (in database
# postgres) with the orders columns, filled from the JSON lines LINES (an
# array ref) by PostgreSQL's own JSON functions: what the records are,
# worked out without the extension, for the expected results of a test.
sub orders_table
{
	my ($node, $table, $lines) = @_;
	my $file = abs_path(PostgreSQL::Test::Utils::tempdir()) . "/$table.json";

	open my $fh, '>', $file or die "$file: $!";
	print $fh map { "$_\n" } @$lines;
	close $fh or die "$file: $!";
	$node->safe_psql(
		'postgres', qq{
CREATE TABLE ${table}_lines (line text);
COPY ${table}_lines FROM '$file';
CREATE TABLE $table (${\ ORDER_COLUMNS });
INSERT INTO $table SELECT r.* FROM ${table}_lines l, jsonb_populate_record(NULL::$table, l.line::jsonb) r;
});
	return;
}

# compare_rows(NODE, SINK, EXPECTED, COLUMNS, WHAT): the relations SINK and
# EXPECTED (in database postgres) hold the same rows of COLUMNS, as
# multisets, and there are some; returns how many.
sub compare_rows
{
	my ($node, $sink, $expected, $cols, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $n = $node->safe_psql('postgres', "SELECT count(*) FROM $expected");

	ok($n > 0, "$what: there are expected rows ($n)");
	is( $node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM (SELECT $cols FROM $sink EXCEPT ALL SELECT $cols FROM $expected) d), "
			  . "(SELECT count(*) FROM (SELECT $cols FROM $expected EXCEPT ALL SELECT $cols FROM $sink) d), "
			  . "(SELECT count(*) FROM $sink)"),
		"0|0|$n",
		"$what (no differences either way, $n rows)");
	return $n;
}

# topic_table(NODE, KAFKA, TOPIC, TABLE): a new table TABLE (in database
# postgres) with every message of TOPIC as kcat reads it: (part, off, key,
# value, stream, batch_id, seq, headers jsonb), the last three from the
# headers a Kafka sink gives its messages.  Returns how many there are.
sub topic_table
{
	my ($node, $kafka, $topic, $table) = @_;
	my $file = abs_path(PostgreSQL::Test::Utils::tempdir()) . "/$table.csv";
	my $n = 0;

	open my $fh, '>', $file or die "$file: $!";
	for my $line (split /\n/, $kafka->kcat_query('-C', '-t', $topic, '-e', '-J', '-q'))
	{
		next if $line eq '';
		my $m = JSON::PP->new->decode($line);
		my %h = @{ $m->{headers} || [] };
		my @f = ($m->{partition}, $m->{offset}, $m->{key}, $m->{payload},
			$h{'streaming-stream'}, $h{'streaming-batch-id'}, $h{'streaming-seq'},
			JSON::PP->new->canonical->encode(\%h));
		print $fh join(',', map { defined $_ ? csv_field($_) : '' } @f), "\n";
		$n++;
	}
	close $fh or die "$file: $!";
	$node->safe_psql('postgres', qq{
CREATE TABLE $table (part int, off bigint, key text, value text, stream text, batch_id bigint, seq bigint, headers jsonb);
COPY $table FROM '$file' WITH (FORMAT csv);
});
	return $n;
}

# A CSV field, always quoted (so that an empty string is not NULL).
sub csv_field
{
	my ($v) = @_;
	$v =~ s/"/""/g;
	return qq{"$v"};
}

#-------------------------------------------------------------------------
package StreamingTest::OrderPaymentRounds;

# The stream-stream join tests' input in rounds (TAP 031, 032), on the
# topics and tables of orders_payments_sources: orders one second apart;
# most have a payment 0-30 minutes later, some none, some two, some only
# one outside the 30 minutes; a round's orders' payments come partly with
# the round, partly one round earlier (before their orders).  Each record
# goes to Kafka and, as jsonb, to orders_in or payments_in.
#   my $r = StreamingTest::OrderPaymentRounds->new($node, $kafka, $orders_topic, $payments_topic);
#   $r->first_round(\@streams, \@shapes);   # round(400), process_all, the twins' helpers
#   $r->round(400);                  # a round (and half the next one's payments)
#   $r->round(400, last => 1);       # the rest of the payments, none ahead
#   $r->finish_and_check(\@streams, \%expected);   # the last round, the flush, the end checks

use strict;
use warnings;

sub new
{
	my ($class, $node, $kafka, $orders_topic, $payments_topic) = @_;
	return bless {
		node => $node,
		kafka => $kafka,
		orders_topic => $orders_topic,
		payments_topic => $payments_topic,
		base => 1_704_067_200,    # 2024-01-01 00:00:00 UTC
		next_order => 1,
		norders => 0,
		npayments => 0,
		early => [],
	}, $class;
}

sub _payments_of
{
	my ($id, $t) = @_;
	my $r = rand();
	my @delays =
	    $r < 0.08 ? ()
	  : $r < 0.12 ? (-60)
	  : $r < 0.16 ? (1801 + int(rand(600)))
	  : $r < 0.24 ? (int(rand(1801)), int(rand(1801)))
	  : (int(rand(1801)));
	my $k = 0;
	return map { sprintf('{"payment_id": %d, "order_id": %d, "payment_time": "%s"}', $id * 10 + $k++, $id, StreamingTest::iso_utc($t + $_)) }
	  @delays;
}

sub _produce
{
	my ($self, $topic, $table, $lines) = @_;
	return unless @$lines;
	$self->{kafka}->produce_lines($topic, $lines);
	$self->{node}->safe_psql('postgres',
		"INSERT INTO $table SELECT d::jsonb FROM unnest(" . StreamingTest::sql_array($lines) . "::text[]) d");
	return;
}

sub round
{
	my ($self, $n, %opts) = @_;
	my (@o, @p);
	my @now = @{ $self->{early} };
	$self->{early} = [];
	for (1 .. $n)
	{
		my $id = $self->{next_order}++;
		my $t = $opts{at} // $self->{base} + $id;
		push @o, sprintf('{"order_id": %d, "amount": %.2f, "order_time": "%s"}', $id, 1 + rand(500), StreamingTest::iso_utc($t));
		# the flush: its order's payment at once
		push @now, sprintf('{"payment_id": %d, "order_id": %d, "payment_time": "%s"}', $id * 10, $id, StreamingTest::iso_utc($t))
		  if $opts{at};
	}
	# the next round's orders' payments, half of them now (before their orders)
	unless ($opts{at} || $opts{last})
	{
		for my $id ($self->{next_order} .. $self->{next_order} + $n - 1)
		{
			my @ps = _payments_of($id, $self->{base} + $id);
			if (rand() < 0.5) { push @p, @ps; }
			else { push @{ $self->{early} }, @ps; }
		}
	}
	push @p, @now;
	# the payments first: a batch may hold a payment whose order is still unread
	$self->_produce($self->{payments_topic}, 'payments_in', \@p);
	$self->_produce($self->{orders_topic}, 'orders_in', \@o);
	$self->{norders} += @o;
	$self->{npayments} += @p;
	return;
}

# process_all(STREAMS): each stream's process_available, in turn.
sub process_all
{
	my ($self, $streams) = @_;
	StreamingTest::query_retry($self->{node}, "SELECT streaming.process_available('$_', '180s')") for @$streams;
	return;
}

# first_round(STREAMS, SHAPES): a round of 400 orders, every stream's
# process_available, then each shape's twin with helpers (SHAPE_2) holds
# two of them and its twin without (SHAPE_0) none.
sub first_round
{
	my ($self, $streams, $shapes) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	$self->round(400);
	$self->process_all($streams);
	for my $shape (@$shapes)
	{
		Test::More::is(scalar(StreamingTest::helper_pids($self->{node}, "${shape}_2")), 2,
			"$shape: the stream has two helpers");
		Test::More::is(scalar(StreamingTest::helper_pids($self->{node}, "${shape}_0")), 0,
			"$shape: its twin has none");
	}
	return;
}

# finish_and_check(STREAMS, EXPECTED): the last round (its payments), then
# the final flush (an order and its payment a day later); once each stream
# has caught up and run its no-data batch: its sink is the view
# EXPECTED->{stream} (every pair, every NULL row exactly once), no row was
# late, every record was read once (a self-join's stream, named self*,
# reads only the orders), positions at the topics' ends, still running;
# a stream with helpers (name_2) holds the rows of its twin without (name_0).
sub finish_and_check
{
	my ($self, $streams, $expected) = @_;
	my $node = $self->{node};
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	$self->round(400, last => 1);
	$self->round(1, at => $self->{base} + $self->{next_order} + 86_400);
	for my $s (@$streams)
	{
		StreamingTest::wait_for($node,
			"SELECT lag = 0 AND watermark > '2024-01-01 12:00+00' FROM streaming.streams WHERE name = '$s'",
			't', "$s: caught up, the watermark past every other row", $s);
		StreamingTest::wait_for($node,
			"SELECT num_input_rows = 0 FROM streaming.progress WHERE stream = '$s' ORDER BY batch_id DESC LIMIT 1",
			't', "$s: the last batch is the no-data batch", $s);
	}
	Test::More::note("$self->{norders} orders, $self->{npayments} payments");
	Test::More::ok($node->safe_psql('postgres', "SELECT count(*) FROM orders_left_expected WHERE payment_id IS NULL") > 0,
		'some orders have no payment in time');
	for my $s (@$streams)
	{
		StreamingTest::compare_rows($node, $s, $expected->{$s}, '*', "$s: the sink is the join over all records");
		Test::More::is($node->safe_psql('postgres',
				"SELECT coalesce(sum(num_late_rows), 0) FROM streaming.progress WHERE stream = '$s'"),
			'0', "$s: no row was late");
		StreamingTest::check_progress($node, $s,
			$s =~ /^self/ ? $self->{norders} : $self->{norders} + $self->{npayments}, $s);
		StreamingTest::check_offsets($node, $s, $self->{kafka}, $self->{orders_topic}, "$s: orders");
		StreamingTest::check_offsets($node, $s, $self->{kafka}, $self->{payments_topic}, "$s: payments")
		  unless $s =~ /^self/;
		Test::More::is(StreamingTest::stream_row($node, $s)->{status}, 'running', "$s is running");
	}
	my %streams = map { $_ => 1 } @$streams;
	for my $s (grep { /_2$/ && $streams{ s/_2$/_0/r } } @$streams)
	{
		StreamingTest::compare_rows($node, $s, $s =~ s/_2$/_0/r, '*', "$s: with helpers the rows its twin holds without");
	}
	return;
}

#-------------------------------------------------------------------------
# What was produced: the expected content of a sink.
package StreamingTest::Orders;

use strict;
use warnings;
use Digest::MD5 qw(md5_hex);
use POSIX qw(strftime);

sub new
{
	my ($class) = @_;
	return bless { next_id => 1, ids => [], cents => 0, id_sum => 0 },
	  $class;
}

# One order as a JSON line (about 100 bytes); amount and status are
# functions of the order id.
sub line
{
	my ($self, $id) = @_;
	my $cents = 100 + ($id * 7919) % 99_900;
	my $status = (qw(created paid shipped cancelled))[ $id % 4 ];
	my $ts = strftime('%Y-%m-%dT%H:%M:%SZ', gmtime(1_714_564_800 + $id));
	return (
		sprintf(
			'{"order_id": %d, "amount": %d.%02d, "status": "%s", "event_time": "%s"}',
			$id, int($cents / 100), $cents % 100, $status, $ts),
		$cents);
}

# take(N): the next N orders as lines, counted as produced.
sub take
{
	my ($self, $n) = @_;
	my @lines;
	for (1 .. $n)
	{
		my $id = $self->{next_id}++;
		my ($line, $cents) = $self->line($id);
		push @lines, $line;
		push @{ $self->{ids} }, $id;
		$self->{cents} += $cents;
		$self->{id_sum} += $id;
	}
	return \@lines;
}

sub count { my ($self) = @_; return scalar @{ $self->{ids} }; }

# What sink_stats must return after every order was consumed once.
sub expected_stats
{
	my ($self) = @_;
	my $n = $self->count;
	my $md5 = $n ? md5_hex(join ',', sort { $a <=> $b } @{ $self->{ids} }) : '';
	return join '|', $n,
	  sprintf('%d.%02d', int($self->{cents} / 100), $self->{cents} % 100),
	  $self->{id_sum}, $n, $n, $md5;
}

#-------------------------------------------------------------------------
# A Kafka broker: the mock broker of this test file, or the real broker
# named by KAFKA_BOOTSTRAP_SERVERS.
package StreamingTest::Kafka;

use strict;
use warnings;
use File::Basename qw(basename);
use FindBin;
use IPC::Run ();
use JSON::PP ();
use PostgreSQL::Test::Utils;
use Test::More;

my @running_mocks;

# start(brokers => N): N brokers in the mock (ids 1..N; default 1).
sub start
{
	my ($class, %opts) = @_;
	my $self = bless { lines_per_topic => {} }, $class;
	my $unique = sprintf('%d_%d', time(), $$);

	if (defined $ENV{KAFKA_BOOTSTRAP_SERVERS} && $ENV{KAFKA_BOOTSTRAP_SERVERS} ne '')
	{
		$self->{bootstrap} = $ENV{KAFKA_BOOTSTRAP_SERVERS};
		$self->{mock} = 0;
		$self->{prefix} = "stm_test_${unique}_";
		note "using the Kafka broker at $self->{bootstrap}";
		return $self;
	}

	my $bin = "$FindBin::RealBin/../mock_broker";
	BAIL_OUT("$bin is missing: run make first") unless -x $bin;
	my $name = basename($0, '.pl') . (defined $opts{name} ? "_$opts{name}" : '');
	$self->{in} = '';
	$self->{out} = '';
	$self->{mock} = 1;
	$self->{prefix} = '';
	$self->{harness} = IPC::Run::start(
		[ $bin, '--stdin', '--brokers', $opts{brokers} || 1 ],
		'<', \$self->{in}, '>', \$self->{out},
		'2>', "$PostgreSQL::Test::Utils::log_path/${name}_mock_broker.log");
	$self->{pid} = $self->{harness}->{KIDS}[0]{PID};
	push @running_mocks, $self;
	my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	pump_until($self->{harness}, $timeout, \$self->{out}, qr/\n/)
	  or BAIL_OUT("the mock broker did not start");
	($self->{bootstrap}) = $self->{out} =~ /^(.*)\n/;
	$self->{out} = '';
	note "mock broker (pid $self->{pid}) at $self->{bootstrap}";
	return $self;
}

sub bootstrap { my ($self) = @_; return $self->{bootstrap}; }
sub is_mock { my ($self) = @_; return $self->{mock}; }

# command(LINE): a command to the mock broker's stdin; dies unless "ok".
sub command
{
	my ($self, $line) = @_;
	$self->{out} = '';
	$self->{in} .= "$line\n";
	my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	pump_until($self->{harness}, $timeout, \$self->{out}, qr/\n/)
	  or die "the mock broker did not answer \"$line\"\n";
	die "mock broker: \"$line\": $self->{out}" unless $self->{out} eq "ok\n";
	return;
}

# down / up: take all brokers down, bring them back (SIGUSR1 / SIGUSR2).
sub down
{
	my ($self) = @_;
	die "cannot take a real broker down\n" unless $self->{mock};
	kill 'USR1', $self->{pid} or die "could not signal the mock broker: $!";
	return;
}

sub up
{
	my ($self) = @_;
	die "cannot bring a real broker up\n" unless $self->{mock};
	kill 'USR2', $self->{pid} or die "could not signal the mock broker: $!";
	return;
}

# topic_error(TOPIC, ERR): metadata requests for TOPIC answer with
# librdkafka's error ERR (e.g. TOPIC_AUTHORIZATION_FAILED; NO_ERROR clears
# it); produce_error(ERR, COUNT): the next COUNT produce requests fail with
# ERR.  The mock broker only.
sub topic_error
{
	my ($self, $topic, $err) = @_;
	die "cannot make a real broker fail\n" unless $self->{mock};
	$self->command("topic-error $topic $err");
	return;
}

# rtt(MS): every broker answers MS milliseconds late (the mock only)
sub rtt
{
	my ($self, $ms) = @_;
	die "cannot slow a real broker down\n" unless $self->{mock};
	$self->command("rtt $ms");
	return;
}

sub produce_error
{
	my ($self, $err, $count) = @_;
	die "cannot make a real broker fail\n" unless $self->{mock};
	$self->command("produce-error $err $count");
	return;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{harness};
	kill 'TERM', $self->{pid};
	eval { $self->{harness}->finish; 1 } or $self->{harness}->kill_kill;
	delete $self->{harness};
	@running_mocks = grep { $_ != $self } @running_mocks;
	return;
}

END
{
	my $rc = $?;
	$_->stop for @running_mocks;
	$? = $rc;
}

# kcat(ARGS): kcat's output; dies when it fails.
sub kcat
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-b', $self->{bootstrap}, @args ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat @args failed: $err";
	return $out;
}

# kcat_query(ARGS): kcat's output for a call that only reads (metadata,
# offsets, consuming from the beginning), tried again while it fails, for
# up to $PostgreSQL::Test::Utils::timeout_default seconds.  The broker may
# refuse any client's request for a while (the mock broker's injected
# errors, say request-errors 2 ..., are not only for the stream's client),
# and a test's own look must not fail for that.
sub kcat_query
{
	my ($self, @args) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;

	while (1)
	{
		my $out = eval { $self->kcat(@args) };
		return $out if defined $out;
		die $@ if time() > $deadline;
		select(undef, undef, undef, 0.1);
	}
}

# create_topic(NAME, PARTITIONS): returns the topic's real name (unique on
# a real broker) and its number of partitions.
sub create_topic
{
	my ($self, $base, $nparts) = @_;
	my $topic = $self->{prefix} . $base;

	if ($self->{mock})
	{
		$self->command("create $topic $nparts");
	}
	else
	{
		my ($o, $e) = (q{}, q{});
		my ($tool) = grep { -x $_ } map { "$_/kafka-topics.sh" }
		  (split(/:/, $ENV{PATH}),
			defined $ENV{KAFKA_HOME} ? "$ENV{KAFKA_HOME}/bin" : ());
		if ($tool)
		{
			IPC::Run::run([ $tool, '--bootstrap-server', $self->{bootstrap},
				'--create', '--topic', $topic, '--partitions', $nparts,
				'--replication-factor', '1' ], '>', \$o, '2>', \$e)
			  or die "$tool --create $topic failed: $e";
		}
		else
		{
			# no admin tool: the metadata request below makes the broker
			# auto-create it
			note "no kafka-topics.sh: $topic gets the broker's default partitions";
		}
	}

	# wait until the metadata shows the topic with its partitions
	my $found = 0;
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		my $md = eval {
			JSON::PP::decode_json($self->kcat('-L', '-J', '-t', $topic));
		};
		if ($md)
		{
			my ($t) = grep { $_->{topic} eq $topic } @{ $md->{topics} };
			$found = scalar @{ $t->{partitions} }
			  if $t && !$t->{error} && $t->{partitions};
		}
		last if $found;
		select(undef, undef, undef, 0.1);
	}
	die "topic $topic did not appear\n" unless $found;
	$self->{partitions}{$topic} = $found;
	$self->{produced}{$topic} = { map { $_ => 0 } 0 .. $found - 1 };
	return ($topic, $found);
}

sub partitions { my ($self, $topic) = @_; return $self->{partitions}{$topic}; }

# watermarks(TOPIC, PARTITION...): { partition => [low, high] } of the
# partitions given (default: all), asked again while the broker does not
# answer for all of them (for up to $PostgreSQL::Test::Utils::timeout_default
# seconds).
sub watermarks
{
	my ($self, $topic, @parts) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;

	@parts = 0 .. $self->{partitions}{$topic} - 1 unless @parts;
	while (1)
	{
		my %wm;
		for my $which ([ 0, -2 ], [ 1, -1 ])
		{
			my $out = $self->kcat_query('-Q', map { ('-t', "$topic:$_:$which->[1]") } @parts);
			while ($out =~ /^\S+ \[(\d+)\] offset (\d+)$/mg)
			{
				$wm{$1}[ $which->[0] ] = $2;
			}
		}
		my @missing = grep { !defined $wm{$_}[0] || !defined $wm{$_}[1] } @parts;
		return \%wm unless @missing;
		die "no watermarks for $topic [@missing]\n" if time() > $deadline;
		select(undef, undef, undef, 0.1);
	}
}

# produce_file(TOPIC, PARTITION, FILE, N, KCAT_OPTION...): the N lines of
# FILE into one partition.  When kcat fails and none of them arrived (the
# partition's high watermark says), it is tried again, for up to
# $PostgreSQL::Test::Utils::timeout_default seconds; when some of them
# arrived, it dies (trying again would write them twice).
sub produce_file
{
	my ($self, $topic, $p, $file, $n, @opts) = @_;
	my $before = $self->{produced}{$topic}{$p};
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;

	while (1)
	{
		last if eval { $self->kcat('-P', '-t', $topic, '-p', $p, '-l', @opts, $file); 1 };
		my $err = $@;
		my $high = $self->watermarks($topic, $p)->{$p}[1];
		last if $high == $before + $n;
		die "kcat could not produce to $topic [$p], and " . ($high - $before)
		  . " of its $n records arrived: $err"
		  if $high != $before;
		die $err if time() > $deadline;
		select(undef, undef, undef, 0.1);
	}
	$self->{produced}{$topic}{$p} += $n;
	return;
}

# produce_lines(TOPIC, LINES): LINES round robin over the partitions,
# starting at partition 0; returns [partition, offset] of every line.
# Dies unless every partition then starts at offset 0 and holds exactly
# what was produced to it.
sub produce_lines
{
	my ($self, $topic, $lines) = @_;
	my $n = $self->{partitions}{$topic} or die "unknown topic $topic\n";
	my $dir = PostgreSQL::Test::Utils::tempdir;
	my (@per, @pos);

	for my $i (0 .. $#$lines)
	{
		my $p = $i % $n;
		push @pos, [ $p, $self->{produced}{$topic}{$p} + scalar @{ $per[$p] || [] } ];
		push @{ $per[$p] }, $lines->[$i];
	}
	for my $p (0 .. $n - 1)
	{
		next unless $per[$p];
		my $file = "$dir/p$p";
		open my $fh, '>', $file or die "$file: $!";
		print $fh map { "$_\n" } @{ $per[$p] };
		close $fh or die "$file: $!";
		$self->produce_file($topic, $p, $file, scalar @{ $per[$p] },
			'-X', 'queue.buffering.max.messages=1000000',
			'-X', 'linger.ms=50');
	}

	my $wm = $self->watermarks($topic);
	for my $p (0 .. $n - 1)
	{
		my ($lo, $hi) = @{ $wm->{$p} };
		die "topic $topic [$p]: low offset $lo after producing: the broker dropped data (too much per partition?)\n"
		  if $lo != 0;
		die "topic $topic [$p]: high watermark $hi, but $self->{produced}{$topic}{$p} records were produced\n"
		  if $hi != $self->{produced}{$topic}{$p};
	}
	return \@pos;
}

# produce_to(TOPIC, PARTITION, LINES): LINES into one partition (while
# other partitions' leaders may be down: no watermark check).
sub produce_to
{
	my ($self, $topic, $p, $lines) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir . "/p$p";
	open my $fh, '>', $file or die "$file: $!";
	print $fh map { "$_\n" } @$lines;
	close $fh or die "$file: $!";
	$self->produce_file($topic, $p, $file, scalar @$lines);
	return;
}

# produce_orders(TOPIC, ORDERS, N, poison => [I, ...]): the next N orders
# of ORDERS; a malformed JSON record is inserted before order number I
# (counting from 0 in this call) for each I.  Returns the positions of the
# poison records as [partition, offset, raw].
sub produce_orders
{
	my ($self, $topic, $orders, $n, %opts) = @_;
	my %poison = map { $_ => 1 } @{ $opts{poison_at} || [] };
	my $good = $orders->take($n);
	my (@lines, @poison_idx);

	for my $i (0 .. $#$good)
	{
		if ($poison{$i})
		{
			push @poison_idx, scalar @lines;
			push @lines, qq({"order_id": 0, "amount": 12.5, "status": "poison #$i", "event_time": );
		}
		push @lines, $good->[$i];
	}
	my $pos = $self->produce_lines($topic, \@lines);
	return [ map { [ @{ $pos->[$_] }, $lines[$_] ] } @poison_idx ];
}

# produce_avro(TOPIC, PARTITION, REGISTRY, SUBJECT, SCHEMA, LINES, %opts):
# LINES (JSON records) as Avro in the wire format into one partition, the
# schema (JSON text) registered under SUBJECT; opts: id => N (write that
# schema id, register nothing), key_subject/key_schema (each line is then
# {"key": K, "value": V}; a null value is a tombstone).  Returns how many
# messages were produced.
sub produce_avro
{
	my ($self, $topic, $p, $registry, $subject, $schema, $lines, %opts) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir;
	my ($out, $err) = ('', '');
	my @encode = ("$FindBin::RealBin/../avro_encode.py", '--registry', $registry->url,
		'--schema', $schema,
		defined $opts{id} ? ('--id', $opts{id}) : ('--subject', $subject),
		$registry->auth ? ('--basic-auth', $registry->auth) : (),
		$opts{key_schema} ? ('--key-subject', $opts{key_subject}, '--key-schema', $opts{key_schema}) : ());
	my $in = join '', map { "$_\n" } @$lines;
	IPC::Run::run(\@encode, '<', \$in, '>', "$dir/avro.bin", '2>', \$err)
	  or die "avro_encode.py failed: $err";
	$self->kcat('-P', '-t', $topic, '-p', $p, '-D', '<<<end-of-avro-record-5c1e>>>',
		$opts{key_schema} ? ('-K', '<<<end-of-avro-key-5c1e>>>', '-Z') : (),
		'-X', 'queue.buffering.max.messages=1000000', '-l', "$dir/avro.bin");
	$self->{produced}{$topic}{$p} += scalar @$lines;
	return scalar @$lines;
}

#-------------------------------------------------------------------------
# A schema registry: test/schema_registry.py of this test file, or the real
# one SCHEMA_REGISTRY_URL names.
package StreamingTest::Registry;

use strict;
use warnings;
use File::Basename qw(basename);
use FindBin;
use IPC::Run ();
use PostgreSQL::Test::Utils;

my @running_registries;

# start(basic_auth => 'user:secret'): a registry that wants that user
sub start
{
	my ($class, %opts) = @_;
	my $self = bless { auth => $opts{basic_auth} }, $class;

	if (defined $ENV{SCHEMA_REGISTRY_URL} && $ENV{SCHEMA_REGISTRY_URL} ne '')
	{
		$self->{url} = $ENV{SCHEMA_REGISTRY_URL};
		$self->{mock} = 0;
		$self->{auth} = $ENV{SCHEMA_REGISTRY_BASIC_AUTH};
		return $self;
	}
	$self->{mock} = 1;
	$self->{port} = 0;
	$self->{state} = PostgreSQL::Test::Utils::tempdir . '/registry.json';
	$self->{log} = "$PostgreSQL::Test::Utils::log_path/" . basename($0, '.pl') . '_registry.log';
	$self->up;
	push @running_registries, $self;
	return $self;
}

sub url { my ($self) = @_; return $self->{url}; }
sub auth { my ($self) = @_; return $self->{auth}; }
sub is_mock { my ($self) = @_; return $self->{mock}; }

# up: (again) on the same port, with the same schemas
sub up
{
	my ($self) = @_;
	die "cannot start a real registry\n" unless $self->{mock};
	my $out = '';
	$self->{harness} = IPC::Run::start(
		[ "$FindBin::RealBin/../schema_registry.py", '--port', $self->{port},
			'--state', $self->{state}, '--log', $self->{log},
			$self->{auth} ? ('--basic-auth', $self->{auth}) : () ],
		'<', \undef, '>', \$out, '2>>', $self->{log});
	my $timeout = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	IPC::Run::pump($self->{harness}) until $out =~ /\n/ || $timeout->is_expired;
	die "the schema registry did not start\n" unless $out =~ m{^(http://127\.0\.0\.1:(\d+))\n};
	($self->{url}, $self->{port}) = ($1, $2);
	return;
}

# down: stopped (connections to its port are refused until up)
sub down
{
	my ($self) = @_;
	die "cannot stop a real registry\n" unless $self->{mock};
	return unless $self->{harness};
	$self->{harness}->signal('TERM');
	eval { $self->{harness}->finish; 1 } or $self->{harness}->kill_kill;
	delete $self->{harness};
	return;
}

# subject(BASE): a subject name, unique per run on a real registry
sub subject
{
	my ($self, $base) = @_;
	return $self->{mock} ? $base : "${base}_$$";
}

END
{
	my $rc = $?;
	$_->down for grep { $_->{harness} } @running_registries;
	$? = $rc;
}

1;
