# 020_quickstart.pl: the README's quick start runs as written, on the
# cluster `make start` starts (SPEC 1), and `make stop` stops it.
#
# From README.md it takes the blocks after the HTML comments
#   <!-- quickstart shell -->   shell: make start, the env file, kcat, psql
#   <!-- quickstart sql -->     what the reader pastes into that psql
#   <!-- quickstart output -->  what the last queries print
#   <!-- example -->            (any number) SQL of the sections after it
# and runs the shell block in the checkout with the SQL block as psql's
# input, as a paste is; its output must end with the output block, with no
# error or warning.  Then the examples run, in order, in one psql session
# that has :'bootstrap' as the quick start's, and every stream they made
# must process what is in the topic.  Then a second `make start` says it is
# running and prints the same, `make stop` stops the server and the broker
# (their processes are gone, their files removed), and a second `make stop`
# finds nothing to stop.
#
# The quick start is about make start's own broker: KAFKA_BOOTSTRAP_SERVERS
# is unset for it, also when the other tests run against a real broker.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use Cwd qw(abs_path);
use IPC::Run qw(run timeout);
use PostgreSQL::Test::Utils;
use Test::More;

my $root = abs_path("$FindBin::RealBin/../..");
my $readme = slurp_file("$root/README.md");

# the fenced block right after <!-- MARKER -->
sub block
{
	my ($marker) = @_;
	$readme =~ /<!-- \Q$marker\E -->\n```[a-z]*\n(.*?)```\n/s
	  or BAIL_OUT("README.md has no block after <!-- $marker -->");
	return $1;
}
my $shell = block('quickstart shell');
my $sql = block('quickstart sql');
my $expected = block('quickstart output');
my @examples = $readme =~ /<!-- example -->\n```sql\n(.*?)```\n/sg;
ok(@examples > 0, 'README.md has examples to run after the quick start');

# make start's broker and cluster, whatever the caller's environment says
delete @ENV{qw(KAFKA_BOOTSTRAP_SERVERS STREAMING_START_BOOTSTRAP PGHOST PGPORT
	PGUSER PGDATABASE PGSERVICE)};
# the system's pg_config (the private installation's is first on PATH, and
# has no server headers to build with)
for my $dir (split /:/, $ENV{PATH})
{
	my $pg_config = "$dir/pg_config";
	next unless -x $pg_config;
	my $inc = `$pg_config --includedir-server 2>/dev/null`;
	chomp $inc;
	if (-f "$inc/postgres.h")
	{
		$ENV{PG_CONFIG} = $pg_config;
		last;
	}
}
ok($ENV{PG_CONFIG}, "a pg_config with the server's headers: $ENV{PG_CONFIG}");

# run_in_checkout(SHELL, STDIN): its status, stdout and stderr.  The limit
# only catches a hang: make start builds the extension into a copy of the
# server's tree, which took more than 10 minutes on a loaded machine.
my $step_timeout = 10 * $PostgreSQL::Test::Utils::timeout_default;

sub run_in_checkout
{
	my ($script, $in) = @_;
	my ($out, $err) = ('', '');
	my $ok = run [ 'bash', '-c', "cd '$root' && $script" ], '<', \$in, '>', \$out,
	  '2>', \$err, timeout($step_timeout);
	return ($ok, $out, $err);
}

# a process that exists and is not a zombie
sub alive
{
	my ($pid) = @_;
	return 0 unless kill(0, $pid);
	my $status = -r "/proc/$pid/status" ? slurp_file("/proc/$pid/status") : '';
	return $status !~ /^State:\s*Z/m;
}

# what make start prints about where things are, the same every time
sub connection_lines
{
	my ($out) = @_;
	return join "\n", grep { /^(Connect|Kafka|Environment|Server log):/ } split /\n/, $out;
}

# ---- the quick start, as written ------------------------------------------
my ($ok, $out, $err) = run_in_checkout($shell, $sql);
ok($ok, 'the quick start ran') or diag("stdout:\n$out\nstderr:\n$err");
like($out, qr/^PostgreSQL and Kafka are running\.$/m, 'make start started them');
my $where = connection_lines($out);
like($where, qr/^Connect: +psql -h \S+ -p 5432 -U \S+ -d postgres$/m,
	'make start printed a psql command line');
like($where, qr/^Kafka: +127\.0\.0\.1:\d+ \(the embedded mock broker\)$/m,
	'make start printed the bootstrap address');
like($where, qr{^Environment: +\. \Q$root\E/tmp_start/env$}m,
	'make start printed the file to source');
unlike($err, qr/ERROR|WARNING|FATAL/, 'no error or warning') or diag($err);
(my $got = $out) =~ s/\s+\z//;
(my $want = $expected) =~ s/\s+\z//;
ok(substr($got, -length($want)) eq $want,
	'the quick start printed what README.md says')
  or diag("README.md says:\n$want\n\nit printed:\n$got");

# ---- the examples, in order, in one session -------------------------------
my $examples = join "\n", "\\set ON_ERROR_STOP on",
  "\\getenv bootstrap KAFKA_BOOTSTRAP_SERVERS", @examples,
  # every stream of the topic reads what is in it, and none fails (the rate
  # source's values come due all the time: process_available would wait on)
  "SELECT streaming.process_available(name, '120s') FROM streaming.streams WHERE source = 'orders' ORDER BY name;",
  "SELECT 'not running: ' || name || ' ' || status || ' ' || coalesce(last_error, '')"
  . " FROM streaming.streams WHERE status <> 'running';",
  "SELECT 'enriched ' || count(*) FROM orders_enriched;",
  "SELECT 'user_totals ' || string_agg(user_id || ':' || orders || ':' || total, ' ' ORDER BY user_id) FROM user_totals;",
  "SELECT 'delivered ' || sum(num_delivered_rows) FROM streaming.progress WHERE stream = 'clean_orders';";
($ok, $out, $err) = run_in_checkout('. tmp_start/env && psql -X -At', $examples);
ok($ok, "README.md's examples ran after the quick start")
  or diag("stdout:\n$out\nstderr:\n$err");
unlike($err, qr/ERROR|FATAL/, 'no error in the examples') or diag($err);
unlike($out, qr/^not running: /m, 'every stream of the examples runs') or diag($out);
# orders of users 7, 3, 7, 3, 1 (9 is blocked); paid ones of 7, 7, 9, 1
like($out, qr/^enriched 5$/m, 'the join with tables left out the blocked user');
like($out, qr/^user_totals 1:1:3.10 7:2:19.75 9:1:99.90$/m,
	'the sink function merged the paid orders');
like($out, qr/^delivered 6$/m, 'the Kafka sink delivered every order');

# ---- make start again, make stop ------------------------------------------
my $state = slurp_file("$root/tmp_start/state");
chomp $state;
my $postmaster = (split /\n/, slurp_file("$state/pgdata/postmaster.pid"))[0];
my ($broker) = slurp_file("$state/start.info") =~ /^broker_pid=(\d+)$/m;
($ok, $out, $err) = run_in_checkout('make start', '');
ok($ok, 'a second make start succeeds') or diag($err);
like($out, qr/already running/, 'it says they are running');
is(connection_lines($out), $where, 'and prints the same');

($ok, $out, $err) = run_in_checkout('make stop', '');
ok($ok, 'make stop succeeds') or diag($err);
like($out, qr/^Stopped make start's PostgreSQL and Kafka/m, 'it says what it stopped');
ok(!alive($postmaster), "the server (pid $postmaster) is gone");
ok(!alive($broker), "the broker (pid $broker) is gone");
ok(!-e $state && !-e "$root/tmp_start", 'their files are gone');
($ok, $out, $err) = run_in_checkout('make stop', '');
ok($ok, 'a second make stop succeeds');
like($out, qr/^Nothing to stop/m, 'and finds nothing to stop');

done_testing();
