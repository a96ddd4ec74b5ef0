# 021_scaleout.pl: past one server (SPEC 8) with three clusters on this
# machine and one broker.  s1 and s2 run the same aggregate stream over
# shares 0/2 and 1/2 of a 4-partition topic; hub runs it over the whole topic
# (the single-server reference) and holds streaming.combine_view over
# postgres_fdw foreign tables of s1's and s2's partial states.  The combined
# result must equal the single-server one: after a first backlog, after
# kill -9 of s1's worker while it reads, and after partition 3 moved from s2
# to s1 (export_share / import_share, both streams stopped).  A server that
# cannot be reached makes the view fail, naming it.  Every step waits for a
# condition (process_available, wait_for), never a fixed time.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('scaleout_orders', 4);
is($nparts, 4, 'the topic has 4 partitions');
my $orders = StreamingTest::Orders->new;

my %node;
$node{$_} = streaming_node($_) for qw(s1 s2 hub);
for my $n (values %node)
{
	$n->safe_psql('postgres', 'CREATE EXTENSION hll; CREATE EXTENSION tdigest');
}

# the same stream everywhere: one-minute windows per status, the aggregates
# of SPEC 8 (count, sum, avg, min/max, hll, tdigest)
my $query = q{SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status,
  count(*) AS n, sum(amount) AS total, avg(amount) AS mean, min(order_id) AS first_id,
  max(order_id) AS last_id, hll_cardinality(hll_add_agg(hll_hash_bigint(order_id))) AS ids,
  tdigest_percentile(amount::float8, 100, 0.5) AS median
  FROM orders_src GROUP BY streaming.tumble(event_time, '1 minute'), status};
my %share = (s1 => q{'0/2'}, s2 => q{'1/2'});
for my $name (qw(s1 s2 hub))
{
	create_orders_source($node{$name}, 'orders_src', $kafka, $topic,
		$share{$name} ? (share => $share{$name}) : ());
	$node{$name}->safe_psql('postgres',
		"SELECT streaming.create_stream('totals', \$q\$$query\$q\$, output_mode => 'update')");
}

# hub reads s1's and s2's partial states as the same superuser
my $user = $node{hub}->safe_psql('postgres', 'SELECT current_user');
$node{hub}->safe_psql('postgres', 'CREATE EXTENSION postgres_fdw');
for my $name (qw(s1 s2))
{
	my ($host, $port) = ($node{$name}->host, $node{$name}->port);
	$node{hub}->safe_psql('postgres',
		"CREATE SERVER $name FOREIGN DATA WRAPPER postgres_fdw "
		  . "OPTIONS (host '$host', port '$port', dbname 'postgres');"
		  . "CREATE USER MAPPING FOR CURRENT_USER SERVER $name OPTIONS (user '$user')");
}

# process_available on each server: everything produced so far is read
sub catch_up
{
	my ($what) = @_;
	for my $name (qw(s1 s2 hub))
	{
		wait_for($node{$name},
			"SELECT true FROM (SELECT streaming.process_available('totals', '5 minutes')) x",
			't', "$what: $name read what is there", 'totals');
	}
	return;
}

my $columns = 'ws, we, status, n, total, mean, first_id, last_id, ids, median';
# the combined view against hub's own stream, both ways
sub check_combined
{
	my ($what) = @_;
	my $diff = $node{hub}->safe_psql('postgres',
		"SELECT count(*) FROM ((SELECT $columns FROM totals_all EXCEPT ALL SELECT $columns FROM totals) "
		  . "UNION ALL (SELECT $columns FROM totals EXCEPT ALL SELECT $columns FROM totals_all)) d");
	is($diff, '0', "$what: the combined view equals the single server's result");
	is($node{hub}->safe_psql('postgres', 'SELECT sum(n) FROM totals_all'),
		$orders->count, "$what: every order counted once over the servers");
	my $parts = join ',', map {
		$node{$_}->safe_psql('postgres', 'SELECT coalesce(sum(n), 0) FROM totals')
	} qw(s1 s2);
	note "$what: s1, s2 counted $parts of " . $orders->count;
	if ($diff ne '0')
	{
		diag($node{hub}->safe_psql('postgres',
			"(SELECT 'view' AS side, $columns FROM totals_all EXCEPT ALL SELECT 'view', $columns FROM totals) "
			  . "UNION ALL (SELECT 'hub', $columns FROM totals EXCEPT ALL SELECT 'hub', $columns FROM totals_all) "
			  . "ORDER BY 2, 4, 1 LIMIT 20"));
	}
	return;
}

$kafka->produce_orders($topic, $orders, 2000);
catch_up('first backlog');
$node{hub}->safe_psql('postgres',
	"SELECT streaming.combine_view('totals_all', 'totals', servers => ARRAY['s1', 's2'])");
check_combined('first backlog');
for my $name (qw(s1 s2))
{
	isnt($node{$name}->safe_psql('postgres', 'SELECT coalesce(sum(n), 0) FROM totals'),
		'0', "$name read its share");
}

# kill -9 of s1's worker while it has records to read: the postmaster
# restarts every process, the worker resumes from its committed positions
$kafka->produce_orders($topic, $orders, 1500);
my $pid = $node{s1}->safe_psql('postgres',
	"SELECT pid FROM streaming.worker_pids() w JOIN streaming.stream_defs s ON s.id = w.stream_id "
	  . "WHERE s.name = 'totals' AND pid IS NOT NULL");
like($pid, qr/^\d+$/, "s1's worker runs (pid $pid)");
ok(kill('KILL', $pid), "killed s1's worker $pid");
catch_up('after kill -9');
check_combined('after kill -9 of s1\'s worker');

# move partition 3 from s2 to s1: both stopped, s2 gives it up, s1 takes it
for my $name (qw(s1 s2))
{
	$node{$name}->safe_psql('postgres', "SELECT streaming.stop('totals')");
}
$node{s2}->safe_psql('postgres', "SELECT streaming.alter_kafka_source('orders_src', share => '1/4')");
my $moved = $node{s2}->safe_psql('postgres', "SELECT streaming.export_share('totals', share => '3/4')");
like($moved, qr/"part_no": 3/, 'export_share gave partition 3');
$node{s1}->safe_psql('postgres', "SELECT streaming.alter_kafka_source('orders_src', share => '0,2,3/4')");
my $quoted = $moved;
$quoted =~ s/'/''/g;
$node{s1}->safe_psql('postgres', "SELECT streaming.import_share('totals', '$quoted')");
is($node{s2}->safe_psql('postgres',
		"SELECT count(*) FROM streaming.positions p JOIN streaming.stream_defs s ON s.id = p.stream_id "
		  . "WHERE s.name = 'totals' AND p.part_no = 3"),
	'0', 's2 has no position in partition 3 any more');
for my $name (qw(s1 s2))
{
	$node{$name}->safe_psql('postgres', "SELECT streaming.start('totals')");
}
$kafka->produce_orders($topic, $orders, 1500);
catch_up('after the move');
check_combined('after partition 3 moved from s2 to s1');
my $p3 = $node{s1}->safe_psql('postgres',
	"SELECT p.position FROM streaming.positions p JOIN streaming.stream_defs s ON s.id = p.stream_id "
	  . "WHERE s.name = 'totals' AND p.part_no = 3");
is($p3, $kafka->watermarks($topic, 3)->{3}[1], 's1 read partition 3 to its end');

# a server that cannot be reached: the view fails and names it
$node{s2}->stop('fast');
my ($ret, $out, $err) = $node{hub}->psql('postgres', 'SELECT count(*) FROM totals_all');
isnt($ret, 0, 'with s2 down the view fails');
like($err, qr/"s2"/, 'the error names server s2');
$node{s2}->start;
catch_up('after s2 came back');
check_combined('after s2 came back');

# a second role on hub without user mappings reads nothing of them
$node{hub}->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
($ret, $out, $err) = $node{hub}->psql('postgres', 'SET ROLE mallory; SELECT count(*) FROM totals_all');
isnt($ret, 0, 'mallory cannot read the combined view');
($ret, $out, $err) = $node{hub}->psql('postgres',
	"SET ROLE mallory; SELECT streaming.combine_view('mallory_view', 'totals', servers => ARRAY['s1'])");
isnt($ret, 0, 'mallory cannot make a combine view over s1');

$_->stop for values %node;
$kafka->stop;
done_testing();
