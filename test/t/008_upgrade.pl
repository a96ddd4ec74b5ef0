# 008_upgrade.pl: upgrading a database with running streams (README,
# "Upgrading"): install the new package, restart, ALTER EXTENSION streaming
# UPDATE.
#
# The node first runs the REAL earlier release: its library and scripts,
# built from git history by test/old_version.sh into an installation of
# its own (test/run-tests.sh passes the version in STREAMING_UPGRADE_FROM
# and the installation in STREAMING_UPGRADE_FROM_INSTALL).  There a Kafka
# source feeds three streams and a second source a fourth, all run by
# workers:
#   up_all     stateless: every record, with its position;
#   up_update  update mode, 5-minute tumbling windows by status;
#   up_append  append mode, the same windows, watermark 1 hour;
#   up_dedup   dedup_keys => order_id, over records that repeat ids.
# They process the first records and keep state (groups, open windows,
# dedup keys).  Then the node is stopped and started again from the current
# installation, with the same data directory: the new library on the old
# catalog.  Its workers must wait, saying so once in the log, writing
# nothing and counting no failure, while more records arrive; the SQL
# functions refuse with a clear error.  After ALTER EXTENSION streaming
# UPDATE the workers go on by themselves, and after the last records every
# sink must equal processing every record exactly once: the stateless sink
# holds every record once, the aggregates equal a plain GROUP BY over every
# record (append: the windows the watermark closed), the dedup sink holds
# every order once.
#
# Then the upgraded catalog must equal a fresh CREATE EXTENSION in another
# database of the same node, and the tables the streams made under the old
# release (state tables, sinks, source views) those the same definitions
# make under the new one.  Both are compared by a query over the catalogs
# (test/t/extension_catalog.sql; see there what it covers), not by pg_dump:
# a plain pg_dump --schema-only leaves the extension's objects out, and
# pg_dump --schema-only --binary-upgrade prints them together with OIDs,
# relfilenodes, frozen xids, column versions, \restrict keys and the
# configuration tables as an array of OIDs, all of which differ between two
# databases, and with the dropped columns an upgrade leaves behind, which a
# fresh install has not: normalised, the configuration tables can no longer
# be told apart, and every dropped column is a false difference.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

if ($ENV{STREAMING_UPGRADE_FROM_SKIP})
{
	plan skip_all => "no release to upgrade from: $ENV{STREAMING_UPGRADE_FROM_SKIP}";
}
if ($ENV{STREAMING_UPGRADE_FROM_ERROR})
{
	fail("the release to upgrade from was built: $ENV{STREAMING_UPGRADE_FROM_ERROR}");
	done_testing();
	exit;
}
if (!$ENV{STREAMING_UPGRADE_FROM_INSTALL})
{
	plan skip_all =>
	  'STREAMING_UPGRADE_FROM_INSTALL is not set: run this test with make test, whose test/run-tests.sh builds the release to upgrade from';
}
my $from = $ENV{STREAMING_UPGRADE_FROM};
my $old_install = $ENV{STREAMING_UPGRADE_FROM_INSTALL};
note "upgrading from release $from, installed in $old_install";

my $epoch0 = 1_714_564_800;    # event time of order i: $epoch0 + i seconds
my $delay_s = 3600;            # the watermark delay of up_append
my @streams = qw(up_all up_update up_append up_dedup);

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_008', 4);
my ($dup_topic) = $kafka->create_topic('dups_008', 2);
my $orders = StreamingTest::Orders->new;
my @dup_ids;    # the order ids produced to the dedup topic, in order

# produce_dups(IDS): the orders with these ids (the same lines as in the
# orders topic: an id is always the same record) to the dedup topic.
sub produce_dups
{
	my @ids = @_;
	$kafka->produce_lines($dup_topic, [ map { ($orders->line($_))[0] } @ids ]);
	push @dup_ids, @ids;
	return;
}

# define_streams(NODE, DB, START): the sources and streams of this test.
sub define_streams
{
	my ($node, $db, $start) = @_;
	my $bootstrap = $kafka->bootstrap;
	my $cols = ORDER_COLUMNS;
	my $all_cols = ORDER_QUERY_COLUMNS;

	$node->safe_psql(
		$db, qq{
SELECT streaming.create_kafka_source('orders_src', '$bootstrap', topics => ARRAY['$topic'],
    starting_offsets => 'earliest', columns => '$cols', max_offsets_per_trigger => 500);
SELECT streaming.create_kafka_source('dups_src', '$bootstrap', topics => ARRAY['$dup_topic'],
    starting_offsets => 'earliest', columns => '$cols', max_offsets_per_trigger => 300);
SELECT streaming.create_stream('up_all', 'SELECT $all_cols FROM orders_src', start => $start);
SELECT streaming.create_stream('up_update',
    \$\$SELECT streaming.window_start() AS ws, status, count(*) AS n, sum(amount) AS total
      FROM orders_src GROUP BY streaming.tumble(event_time, '5 minutes'), status\$\$,
    output_mode => 'update', start => $start);
SELECT streaming.create_stream('up_append',
    \$\$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status,
             count(*) AS n, sum(amount) AS total
      FROM orders_src GROUP BY streaming.tumble(event_time, '5 minutes'), status\$\$,
    output_mode => 'append', watermark => '$delay_s seconds', start => $start);
SELECT streaming.create_stream('up_dedup',
    'SELECT order_id, amount, status, event_time FROM dups_src',
    dedup_keys => ARRAY['order_id'], start => $start);
});
	return;
}

# records read by each stream's committed batches
sub processed
{
	my ($node) = @_;
	my $out = $node->safe_psql('postgres',
		    "SELECT string_agg(s.name || ' ' || coalesce(p.n, 0), ', ' ORDER BY s.name) "
		  . "FROM streaming.streams s LEFT JOIN (SELECT stream, sum(num_input_rows) AS n "
		  . "FROM streaming.progress GROUP BY stream) p ON p.stream = s.name");
	return $out;
}

sub expected_processed
{
	my %n = (
		up_all => $orders->count,
		up_update => $orders->count,
		up_append => $orders->count,
		up_dedup => scalar @dup_ids);
	return join ', ', map { "$_ $n{$_}" } sort keys %n;
}

sub process_available
{
	my ($node) = @_;
	$node->safe_psql('postgres', "SELECT streaming.process_available('$_', '120s')")
	  for @streams;
	return;
}

#
# The earlier release
#
$kafka->produce_orders($topic, $orders, 6_000);
produce_dups(1 .. 600);

my $old = streaming_node('before', install_path => $old_install);
is($old->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'streaming'"),
	$from, "the node runs release $from");
is( $old->safe_psql('postgres', "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'"),
	"$old_install/lib", "its library is that of release $from");
define_streams($old, 'postgres', 'true');
process_available($old);
# a dead letter as the earlier release kept it: the whole record, 100 kB
$old->safe_psql('postgres',
	"INSERT INTO streaming.dead_letters (stream, source, position, raw, error, sqlstate) "
	  . "VALUES ('up_all', 'orders_src', '{}', convert_to(repeat('x', 100000), 'UTF8'), 'a test', '22P02')");
is(processed($old), expected_processed(), "release $from: every stream read the first records");
# 6,000 s of event time: the windows that end by 6,000 - 3,600 s are closed
is( $old->safe_psql('postgres', 'SELECT count(*) FROM up_append'),
	8 * 4, "release $from: the append stream wrote the windows its watermark closed");
my $update_state = 'streaming.state_'
  . $old->safe_psql('postgres', "SELECT id FROM streaming.stream_defs WHERE name = 'up_update'");
ok($old->safe_psql('postgres', "SELECT count(*) FROM $update_state") > 0,
	"release $from: the update stream keeps state ($update_state)");
$old->stop;

#
# The new package: the same data directory with the current installation
#
my $new = PostgreSQL::Test::Cluster->new('after', port => $old->port);
rename($old->data_dir, $new->data_dir)
  or die "could not move " . $old->data_dir . " to " . $new->data_dir . ": $!";
$new->start;
my $to = $new->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'streaming'");
isnt($to, $from, "the current installation has another version ($to)");
is($new->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'streaming'"),
	$from, "after the restart the catalog is still at $from");

my $waiting_sql =
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streaming worker' "
  . "AND query = 'waiting for ALTER EXTENSION streaming UPDATE'";
wait_for($new, $waiting_sql, scalar @streams,
	'every worker waits for ALTER EXTENSION streaming UPDATE (pg_stat_activity)');
my $message = "the streaming catalog is at version $from but the library is version $to";

# the SQL functions refuse, with the message and its hint
for my $call ("streaming.run_batch('up_all')", "streaming.stop('up_all')",
	"streaming.process_available('up_all')",
	"streaming.create_stream('up_more', 'SELECT order_id FROM orders_src')")
{
	my ($ret, $out, $err) =
	  $new->psql('postgres', "\\set VERBOSITY verbose\nSELECT $call");
	isnt($ret, 0, "before the update, $call fails");
	like($err, qr/ERROR:  55000: \Q$message\E\n.*HINT:  Run ALTER EXTENSION streaming UPDATE\./s,
		"... with the versions, SQLSTATE 55000 and the hint");
}

# more records while they wait; each worker looks again after they are there
$kafka->produce_orders($topic, $orders, 1_500);
produce_dups(401 .. 1000);
my $produced_at = $new->safe_psql('postgres', 'SELECT now()');
wait_for($new, "$waiting_sql AND state_change > '$produced_at'", scalar @streams,
	'every worker looked at the catalog again after the new records arrived, and still waits');
is( $new->safe_psql('postgres',
		"SELECT string_agg(s.name || ' ' || p.n, ', ' ORDER BY s.name) FROM streaming.streams s "
		  . "JOIN (SELECT stream, sum(num_input_rows) AS n FROM streaming.progress GROUP BY stream) p "
		  . "ON p.stream = s.name"),
	"up_all 6000, up_append 6000, up_dedup 600, up_update 6000",
	'while waiting, no batch ran');
is( $new->safe_psql('postgres',
		"SELECT string_agg(format('%s %s %s %s', name, status, failures, last_error IS NULL), ', ' ORDER BY name) "
		  . "FROM streaming.stream_defs"),
	join(', ', map { "$_ running 0 t" } sort @streams),
	'while waiting, the streams are running, with no failure and no error recorded');
my $log = slurp_file($new->logfile);
my $said = () = $log =~
  /LOG:  \Q$message\E\n[^\n]*DETAIL:  [^\n]*\n[^\n]*HINT:  Run ALTER EXTENSION streaming UPDATE\./g;
is($said, scalar @streams, 'each worker said once in the log why it waits, with the hint');

#
# ALTER EXTENSION streaming UPDATE: the streams go on by themselves
#
$new->safe_psql('postgres', 'ALTER EXTENSION streaming UPDATE');
is($new->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'streaming'"),
	$to, "the catalog is at $to");
is( $new->safe_psql('postgres',
		"SELECT length(raw) || ' ' || raw_length || ' ' || (raw_sha256 = sha256(convert_to(repeat('x', 100000), 'UTF8'))) "
		  . "FROM streaming.dead_letters WHERE error = 'a test'"),
	'65536 100000 true',
	'the earlier release\'s dead letter keeps its first 64 kB, with the length and SHA-256 of the whole record');
$kafka->produce_orders($topic, $orders, 1_500);
produce_dups(901 .. 1500, 1 .. 100);
process_available($new);
is(processed($new), expected_processed(), 'after the update every stream read every record once');
$log = slurp_file($new->logfile);
my $resumed = () = $log =~ /LOG:  the streaming catalog is at the library's version \Q$to\E: batches resume/g;
is($resumed, scalar @streams, 'each worker said in the log that it resumes');

# the expected results: plain SQL over the very same JSON lines
my $wm_epoch = $epoch0 + $orders->count - $delay_s;
orders_table($new, 'exp_orders', [ map { ($orders->line($_))[0] } 1 .. $orders->count ]);
orders_table($new, 'exp_dups', [ map { ($orders->line($_))[0] } @dup_ids ]);
$new->safe_psql(
	'postgres', qq{
CREATE VIEW exp_update AS
SELECT date_bin('5 minutes', event_time, 'epoch') AS ws, status, count(*) AS n, sum(amount) AS total
FROM exp_orders GROUP BY 1, 2;
CREATE VIEW exp_append AS
SELECT * FROM (SELECT date_bin('5 minutes', event_time, 'epoch') AS ws,
                      date_bin('5 minutes', event_time, 'epoch') + interval '5 minutes' AS we,
                      status, count(*) AS n, sum(amount) AS total
               FROM exp_orders GROUP BY 1, 2, 3) g
WHERE we <= to_timestamp($wm_epoch);
CREATE VIEW exp_dedup AS SELECT DISTINCT * FROM exp_dups;
});

check_sink($new, 'up_all', $orders, 'stateless stream across the upgrade');
compare_rows($new, 'up_update', 'exp_update', 'ws, status, n, total',
	'update mode across the upgrade: the sink equals a plain GROUP BY over every record');
compare_rows($new, 'up_append', 'exp_append', 'ws, we, status, n, total',
	'append mode across the upgrade: the sink holds the windows the watermark closed');
compare_rows($new, 'up_dedup', 'exp_dedup', 'order_id, amount, status, event_time',
	'dedup across the upgrade: every order once');
is( $new->safe_psql('postgres',
		"SELECT watermark = to_timestamp($wm_epoch) FROM streaming.streams WHERE name = 'up_append'"),
	't', 'the watermark is the last event time minus the delay');
is( $new->safe_psql('postgres',
		"SELECT sum(num_late_rows) FROM streaming.progress WHERE stream = 'up_append'"),
	'0', 'no record was late');
is( $new->safe_psql('postgres',
		"SELECT num_state_rows FROM streaming.progress WHERE stream = 'up_dedup' ORDER BY batch_id DESC LIMIT 1"),
	'1500', 'the dedup state holds every key, those of the earlier release too');
for my $s (@streams)
{
	check_progress($new, $s, $s eq 'up_dedup' ? scalar @dup_ids : $orders->count,
		"$s across the upgrade");
	my $row = stream_row($new, $s);
	is("$row->{status} $row->{lag} '$row->{last_error}'", "running 0 ''",
		"$s is running, has no lag and no error");
}

#
# The upgraded catalog equals a fresh install
#
$new->safe_psql('postgres', 'CREATE DATABASE fresh');
$new->safe_psql('fresh', 'CREATE EXTENSION streaming');
define_streams($new, 'fresh', 'false');
is( $new->safe_psql('fresh', 'SELECT string_agg(id || name, \',\' ORDER BY id) FROM streaming.stream_defs'),
	$new->safe_psql('postgres', 'SELECT string_agg(id || name, \',\' ORDER BY id) FROM streaming.stream_defs'),
	'the fresh database has the same streams, with the same ids');

my $catalog_sql = slurp_file("$FindBin::RealBin/extension_catalog.sql");

# catalog(DB): { scope => [lines] }
sub catalog
{
	my ($db) = @_;
	my %lines;
	for my $l (split /\n/, $new->safe_psql($db, $catalog_sql))
	{
		my ($scope, $line) = split /\|/, $l, 2;
		push @{ $lines{$scope} }, $line;
	}
	return \%lines;
}

# same_lines(GOT, EXPECTED, WHAT): the same lines; else the differences
sub same_lines
{
	my ($got, $expected, $what) = @_;
	my (%g, %e);
	$g{$_}++ for @$got;
	$e{$_}++ for @$expected;
	my @diff = (
		(map { "- only after the upgrade: $_" } grep { !$e{$_} } @$got),
		(map { "+ only in a fresh install: $_" } grep { !$g{$_} } @$expected));
	ok(@$expected > 0, "$what: there is something to compare (" . scalar(@$expected) . ' lines)');
	ok(!@diff, $what) or diag(join "\n", @diff);
	return;
}

# Sinks are users' tables: the update leaves them as 0.1.0 made them, and an
# update-mode sink of 0.1.0 has a primary key on its window and group columns
# (a NULL group fails its batches).  The README's statement gives it 0.2.0's
# key; after it, it is as a new one, and the stream goes on writing it.
$new->safe_psql('postgres', q{
	ALTER TABLE up_update DROP CONSTRAINT up_update_pkey,
		ALTER COLUMN ws DROP NOT NULL, ALTER COLUMN status DROP NOT NULL,
		ADD UNIQUE NULLS NOT DISTINCT (ws, status);
});

my $upgraded = catalog('postgres');
my $fresh = catalog('fresh');
same_lines($upgraded->{extension}, $fresh->{extension},
	"the catalog upgraded from $from equals a fresh install of $to");
same_lines($upgraded->{streams}, $fresh->{streams},
	"the state tables, sinks and source views made by $from equal those $to makes");

$new->stop;
$kafka->stop;
done_testing();
