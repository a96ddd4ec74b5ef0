# 009_security.pl: what SPEC 7 asks of workers (the rest is in
# sql/security.sql).
#
# - a stream owned by a role without LOGIN runs in a worker and commits;
# - worker_pids() and the views show a second role none of the first
#   role's running streams;
# - DROP EXTENSION by a role that may not drop it leaves every worker as it
#   was (same pids, still consuming);
# - plugin.library.paths reaches librdkafka for a superuser's source or
#   Kafka sink (the test plugin leaves a marker file), and never when it is
#   smuggled into an ordinary role's stored source or sink (no marker; the
#   stream fails saying why, a sink's rows stay in the outbox);
# - non-superusers' prefetch properties are capped by batch_memory;
# - a SASL password never appears in the server log, pg_stat_activity or
#   the views, after a stream and a Kafka sink failed to connect several
#   times with librdkafka's debug output and log_min_messages = debug5 on;
# - DROP ROLE of an owner of running streams in another database is
#   refused; one of stopped streams there leaves a stream that fails with a
#   clear error when started, and never runs without its owner;
# - a stream that cannot get a background worker shows as waiting, with
#   the reason in source_error.
use strict;
use warnings;

use File::Copy;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;

my $kafka = StreamingTest::Kafka->start;
my ($topic, $nparts) = $kafka->create_topic('orders_009', 4);
my $orders = StreamingTest::Orders->new;
$kafka->produce_orders($topic, $orders, 1_000);

# log_statement stays off: with 'all' (the test framework's default) the
# server logs the statement that creates a source, password and all, as it
# logs CREATE ROLE ... PASSWORD; what is checked is that nothing else does
my $node = streaming_node('main', conf => "streaming.max_retries = 1\n"
	  . "streaming.retry_delay = '100ms'\n"
	  . "log_statement = none\n"
	  . "streaming.kafka_timeout = '2s'\n");
my $bs = $kafka->bootstrap;

$node->safe_psql('postgres', q{
	CREATE ROLE regress_alice;	-- NOLOGIN
	CREATE ROLE regress_bob LOGIN;
	GRANT CREATE ON SCHEMA public TO regress_alice, regress_bob;
});

sub as_alice
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SET ROLE regress_alice; $sql");
}

#
# A NOLOGIN owner's stream runs in a worker
#
as_alice("SELECT streaming.create_kafka_source('alice_src', '$bs', topics => ARRAY['$topic'], "
	  . "starting_offsets => 'earliest', columns => '" . ORDER_COLUMNS . "')");
as_alice("SELECT streaming.create_stream('alice_all', 'SELECT "
	  . ORDER_QUERY_COLUMNS . ", current_user AS by_role FROM alice_src')");
as_alice("SELECT streaming.process_available('alice_all', '60s')");
check_sink($node, 'alice_all', $orders, 'a NOLOGIN owner\'s stream');
is($node->safe_psql('postgres', 'SELECT DISTINCT by_role FROM alice_all'),
	'regress_alice', 'the worker ran the batches as the owner');
my $pid = stream_row($node, 'alice_all')->{worker_pid};
like($pid, qr/^\d+$/, 'the stream has a worker');
is( $node->safe_psql('postgres',
		"SELECT usename FROM pg_stat_activity WHERE pid = $pid"),
	$node->safe_psql('postgres', 'SELECT rolname FROM pg_roles WHERE oid = 10'),
	'the worker is connected as the bootstrap superuser, not as the owner');

#
# A second role sees none of it
#
is( $node->safe_psql('postgres',
		"SET ROLE regress_bob; SELECT (SELECT count(*) FROM streaming.worker_pids()) || '/' || "
		  . "(SELECT count(*) FROM streaming.streams) || '/' || (SELECT count(*) FROM streaming.progress)"),
	'0/0/0', 'a second role sees no workers, streams or progress of the first');
is(as_alice("SELECT count(*) FROM streaming.worker_pids()"),
	'1', 'the owner sees its worker');

#
# DROP EXTENSION by a role that may not drop it changes nothing
#
like(
	psql_error($node, "SET ROLE regress_bob; DROP EXTENSION streaming CASCADE"),
	qr/must be owner of extension streaming/,
	'DROP EXTENSION by a non-owner is refused');
is(stream_row($node, 'alice_all')->{worker_pid}, $pid,
	'after the refused DROP EXTENSION the worker is the same process');
$kafka->produce_orders($topic, $orders, 500);
as_alice("SELECT streaming.process_available('alice_all', '60s')");
check_sink($node, 'alice_all', $orders, 'after the refused DROP EXTENSION');

#
# Prefetch properties of an ordinary role are capped by batch_memory
# (source_kafka.c open_consumer, batch_memory 64MB: librdkafka's queue a
# quarter of it, 16384kB; a fetch at most an eighth, 8MB, and 1MB of one
# partition)
#
$node->safe_psql('postgres', "ALTER SYSTEM SET log_min_messages = debug1");
$node->reload;
as_alice("SELECT streaming.create_kafka_source('alice_big', '$bs', topics => ARRAY['$topic'], "
	  . "starting_offsets => 'earliest', columns => '" . ORDER_COLUMNS . "', "
	  . "kafka_options => '{\"queued.max.messages.kbytes\": 2000000, \"fetch.message.max.bytes\": 1000000000, "
	  . "\"fetch.max.bytes\": 2000000000, \"receive.message.max.bytes\": 2147483647}')");
my $log_offset = -s $node->logfile;
as_alice("SELECT streaming.create_stream('alice_big_all', 'SELECT order_id FROM alice_big', start => false)");
as_alice("SELECT streaming.run_batch('alice_big_all')");
my $log = slurp_file($node->logfile, $log_offset);
like($log,
	qr/Kafka client of source "alice_big" for 4 partitions: queued.max.messages.kbytes=16384, fetch.message.max.bytes=1048576, fetch.max.bytes=8388608, receive.message.max.bytes=100000000/,
	'an ordinary role\'s prefetch properties are capped to its share of batch_memory');
$node->safe_psql('postgres', "ALTER SYSTEM RESET log_min_messages");
$node->reload;

#
# plugin.library.paths: loaded for a superuser, never when smuggled
#
my $plugin_dir = PostgreSQL::Test::Utils::tempdir;
my ($plugin_su, $plugin_user) = ("$plugin_dir/plugin_su.so", "$plugin_dir/plugin_user.so");
copy("$ENV{TESTDIR}/test/plugin_marker.so", $_) or die "copy: $!"
  for ($plugin_su, $plugin_user);
ok(!-e "$plugin_su.loaded" && !-e "$plugin_user.loaded", 'no plugin was loaded yet');

$node->safe_psql('postgres',
	"SELECT streaming.create_kafka_source('su_src', '$bs', topics => ARRAY['$topic'], "
	  . "starting_offsets => 'earliest', columns => '" . ORDER_COLUMNS . "', "
	  . "kafka_options => '{\"plugin.library.paths\": \"$plugin_su\"}')");
$node->safe_psql('postgres',
	"SELECT streaming.create_stream('su_all', 'SELECT order_id FROM su_src', start => false); "
	  . "SELECT streaming.run_batch('su_all')");
ok(-e "$plugin_su.loaded", 'a superuser\'s plugin.library.paths reaches librdkafka (the test can see a load)');

# smuggled into alice's stored source behind the functions' back
$node->safe_psql('postgres',
	"UPDATE streaming.sources SET options = jsonb_set(options, '{kafka_options}', "
	  . "'{\"plugin.library.paths\": \"$plugin_user\"}') WHERE name = 'alice_src'");
$kafka->produce_orders($topic, $orders, 10);
$node->safe_psql('postgres', "SELECT streaming.stop('alice_all'); SELECT streaming.start('alice_all')");
wait_for($node,
	"SELECT status = 'failed' AND last_error LIKE '%plugin.library.paths%reserved to superusers%' "
	  . "AND worker_pid IS NULL FROM streaming.streams WHERE name = 'alice_all'",
	't', 'the stream with the smuggled property fails saying why', 'alice_all');
like(
	psql_error($node, "SELECT streaming.run_batch('alice_all')"),
	qr/Kafka client property "plugin.library.paths" of source "alice_src" is reserved to superusers/,
	'run_batch by a superuser refuses the smuggled property too');
ok(!-e "$plugin_user.loaded", 'the smuggled plugin was never loaded');

# the same for a Kafka sink: its producer is built from the stored options
# checked again, for the sink's owner and the stream's
my ($out_topic) = $kafka->create_topic('orders_009_out', 4);
my ($plugin_su_sink, $plugin_user_sink) = ("$plugin_dir/plugin_su_sink.so", "$plugin_dir/plugin_user_sink.so");
copy("$ENV{TESTDIR}/test/plugin_marker.so", $_) or die "copy: $!"
  for ($plugin_su_sink, $plugin_user_sink);
$node->safe_psql('postgres',
	"SELECT streaming.create_kafka_sink('su_sink', '$bs', '$out_topic', "
	  . "kafka_options => '{\"plugin.library.paths\": \"$plugin_su_sink\"}'); "
	  . "SELECT streaming.create_stream('su_to_kafka', 'SELECT order_id FROM su_src', sink => 'su_sink')");
$node->safe_psql('postgres', "SELECT streaming.process_available('su_to_kafka', '60s')");
ok(-e "$plugin_su_sink.loaded", 'a superuser\'s sink\'s plugin.library.paths reaches librdkafka');
$node->safe_psql('postgres', "SELECT streaming.drop_stream('su_to_kafka')");
as_alice("SELECT streaming.create_kafka_source('alice_src2', '$bs', topics => ARRAY['$topic'], "
	  . "starting_offsets => 'earliest', columns => '" . ORDER_COLUMNS . "'); "
	  . "SELECT streaming.create_kafka_sink('alice_sink', '$bs', '$out_topic'); "
	  . "SELECT streaming.create_stream('alice_to_kafka', 'SELECT order_id FROM alice_src2', "
	  . "sink => 'alice_sink', start => false)");
$node->safe_psql('postgres',
	"UPDATE streaming.sinks SET options = jsonb_set(options, '{kafka_options}', "
	  . "'{\"plugin.library.paths\": \"$plugin_user_sink\"}') WHERE name = 'alice_sink'");
as_alice("SELECT streaming.start('alice_to_kafka')");
wait_for($node,
	"SELECT status = 'failed' AND last_error LIKE '%plugin.library.paths\" of sink \"alice_sink\" is reserved to superusers%' "
	  . "AND worker_pid IS NULL AND outbox_rows > 0 FROM streaming.streams WHERE name = 'alice_to_kafka'",
	't', 'the stream into the sink with the smuggled property fails saying why, its rows kept', 'alice_to_kafka');
ok(!-e "$plugin_user_sink.loaded", 'the plugin smuggled into the sink was never loaded');

#
# Credentials never appear in logs, views or pg_stat_activity
#
my $canary = 'CANARY-' . int(rand(1_000_000_000));
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET log_min_messages = debug5;
	ALTER SYSTEM SET log_error_verbosity = verbose;
});
$node->reload;
$node->safe_psql('postgres',
	"SELECT streaming.create_kafka_source('sasl_src', '$bs', topics => ARRAY['$topic'], "
	  . "starting_offsets => 'earliest', columns => '" . ORDER_COLUMNS . "', "
	  . "kafka_options => '{\"security.protocol\": \"SASL_PLAINTEXT\", \"sasl.mechanism\": \"PLAIN\", "
	  . "\"sasl.username\": \"streaming\", \"sasl.password\": \"$canary\", \"debug\": \"all\", "
	  . "\"socket.timeout.ms\": \"1000\"}')");
$node->safe_psql('postgres',
	"SELECT streaming.create_stream('sasl_all', 'SELECT order_id FROM sasl_src')");
# and a Kafka sink's producer with the same credentials
$node->safe_psql('postgres',
	"SELECT streaming.create_kafka_sink('sasl_sink', '$bs', '$out_topic', "
	  . "kafka_options => '{\"security.protocol\": \"SASL_PLAINTEXT\", \"sasl.mechanism\": \"PLAIN\", "
	  . "\"sasl.username\": \"streaming\", \"sasl.password\": \"$canary\", \"debug\": \"all\", "
	  . "\"socket.timeout.ms\": \"1000\"}'); "
	  . "SELECT streaming.create_stream('sasl_to_kafka', 'SELECT order_id FROM su_src', sink => 'sasl_sink')");
wait_for($node,
	"SELECT coalesce(last_error, '') || coalesce(source_error, '') <> '' AND outbox_rows > 0 "
	  . "FROM streaming.streams WHERE name = 'sasl_to_kafka'",
	't', 'the stream into the SASL sink could not deliver', 'sasl_to_kafka', 120);
wait_for($node,
	"SELECT coalesce(last_error, '') || coalesce(source_error, '') <> '' FROM streaming.streams WHERE name = 'sasl_all'",
	't', 'the SASL stream could not connect', 'sasl_all', 120);
# a few more attempts, with the server restarting the worker in between
$node->safe_psql('postgres', "SELECT streaming.stop('sasl_all'); SELECT streaming.start('sasl_all')");
wait_for($node,
	"SELECT coalesce(last_error, '') || coalesce(source_error, '') <> '' FROM streaming.streams WHERE name = 'sasl_all'",
	't', 'the SASL stream failed to connect again', 'sasl_all', 120);
my $views = $node->safe_psql('postgres',
	"SELECT s::text FROM streaming.streams s UNION ALL SELECT a::text FROM pg_stat_activity a "
	  . "WHERE a.pid <> pg_backend_pid() UNION ALL SELECT p::text FROM streaming.progress p");
unlike($views, qr/$canary/, 'the password is in no view and not in pg_stat_activity');
$node->safe_psql('postgres', "SELECT streaming.drop_stream('sasl_all'); "
	  . "SELECT streaming.drop_stream('sasl_to_kafka', force => true)");
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET log_min_messages;
	ALTER SYSTEM RESET log_error_verbosity;
});
$node->reload;
# the statement that created the source ran without error, so not even it
# was logged; nothing else may mention the password
my $whole_log = slurp_file($node->logfile);
unlike($whole_log, qr/$canary/, 'the password is nowhere in the server log');
like($whole_log, qr/DEBUG/, 'the log has debug output (the check above saw it)');

#
# Owners in another database
#
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', q{
	CREATE EXTENSION streaming;
	CREATE ROLE regress_carol;
	GRANT CREATE ON SCHEMA public TO regress_carol;
	CREATE ROLE regress_dave;
	GRANT CREATE ON SCHEMA public TO regress_dave;
});
# carol owns her source; dave's is a superuser's that he may read (a
# source's view cannot be given away later: ALTER VIEW of it is refused)
for my $r ('regress_carol', 'regress_dave')
{
	$node->safe_psql('other',
		($r eq 'regress_carol' ? "SET ROLE $r; " : '')
		  . "SELECT streaming.create_kafka_source('${r}_src', '$bs', topics => ARRAY['$topic'], "
		  . "starting_offsets => 'earliest', columns => '" . ORDER_COLUMNS . "'); "
		  . "GRANT SELECT ON ${r}_src TO $r; SET ROLE $r; "
		  . "SELECT streaming.create_stream('${r}_all', 'SELECT order_id FROM ${r}_src', "
		  . "start => " . ($r eq 'regress_carol' ? 'true' : 'false') . ")");
}
$node->safe_psql('other', "SET ROLE regress_carol; SELECT streaming.process_available('regress_carol_all', '60s')");
like(
	psql_error($node, 'DROP ROLE regress_carol'),
	qr/role "regress_carol" cannot be dropped because it owns streams in another database/,
	'DROP ROLE of the owner of a running stream in another database is refused');
# dave's stream is stopped: from this database it cannot be seen
$node->safe_psql('other', 'REVOKE CREATE ON SCHEMA public FROM regress_dave');
my ($ret, $out, $err) = $node->psql('postgres', 'DROP ROLE regress_dave');
like($err, qr/cannot be dropped because some objects depend on it/,
	'PostgreSQL itself refuses while the role owns the sink in the other database');
# ... and its privilege on the source's view; with nothing left that
# PostgreSQL tracks, the drop from this database goes through: the stream
# there has lost its owner
$node->safe_psql('other', q{
	REVOKE SELECT ON regress_dave_src FROM regress_dave;
	ALTER TABLE regress_dave_all OWNER TO CURRENT_USER;
});
$node->safe_psql('postgres', 'DROP ROLE regress_dave');
$node->safe_psql('other', "SELECT streaming.start('regress_dave_all')");
ok( $node->poll_query_until('other',
		"SELECT status = 'failed' AND last_error LIKE 'the owner of stream \"regress_dave_all\" (role with OID % does not exist' "
		  . "AND worker_pid IS NULL FROM streaming.streams WHERE name = 'regress_dave_all'"),
	'a stream whose owner was dropped elsewhere fails with a clear error and has no worker');
is($node->safe_psql('other', "SELECT failures FROM streaming.stream_defs WHERE name = 'regress_dave_all'"),
	'1', 'it failed at once, without retries');
$node->safe_psql('other', "SELECT streaming.drop_stream('regress_dave_all')");
is($node->safe_psql('other', "SELECT count(*) FROM streaming.stream_defs WHERE name = 'regress_dave_all'"),
	'0', 'a superuser can drop it');

#
# A stream that should run but cannot get a worker is never "running"
# without one: it is waiting, and source_error says why
#
$node->safe_psql('other', "SELECT streaming.stop('regress_carol_all')");
$node->append_conf('postgresql.conf', "max_worker_processes = 3\n");	# two launchers (streaming, logical replication) and one worker
$node->restart;
$node->safe_psql('postgres', "SELECT streaming.drop_stream('su_all'); SELECT streaming.stop('alice_all')");
for my $i (1, 2)
{
	$node->safe_psql('postgres',
		"SELECT streaming.create_stream('one_of_two_$i', 'SELECT order_id FROM su_src')");
	wait_for($node, "SELECT count(*) = $i FROM streaming.streams WHERE name LIKE 'one_of_two_%' "
		  . "AND (worker_pid IS NOT NULL OR status = 'waiting')",
		't', "stream $i has a worker or waits for one");
}
# the one slot may be held for a moment by another process (a database's
# discovery worker after the restart, the worker of a stream being
# stopped), and the launcher tries again: wait until one stream has the
# worker and the other says why it has none
wait_for($node,
	"SELECT count(*) FILTER (WHERE worker_pid IS NOT NULL) || ' ' || count(*) FILTER (WHERE status = 'waiting' "
	  . "AND worker_pid IS NULL AND source_error LIKE 'no background worker could be started (max_worker_processes = 3)%') "
	  . "FROM streaming.streams WHERE name LIKE 'one_of_two_%'",
	'1 1', 'the stream without a worker is waiting, and source_error says why');
my $waiting = $node->safe_psql('postgres',
	"SELECT name FROM streaming.streams WHERE name LIKE 'one_of_two_%' AND worker_pid IS NULL");
my $other = $waiting eq 'one_of_two_1' ? 'one_of_two_2' : 'one_of_two_1';
$node->safe_psql('postgres', "SELECT streaming.stop('$other')");
wait_for($node, "SELECT status = 'running' AND worker_pid IS NOT NULL AND source_error IS NULL "
	  . "FROM streaming.streams WHERE name = '$waiting'",
	't', 'once a worker is free, the waiting stream runs', $waiting);

$node->stop;
done_testing();
