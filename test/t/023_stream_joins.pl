# 023_stream_joins.pl: joins of two sources under crashes (SPEC 3.6, 6).
#
# Orders and payments on two topics; two worker-driven streams join them
# (an inner and a left outer join, order_id equal and the payment within
# 30 minutes of its order, a watermark of 1 hour on each side), reading
# each source in batches of at most a few hundred records.  While records
# arrive in rounds, at random moments a stream's worker is killed with
# SIGKILL, the postmaster is killed with SIGKILL (and started again at
# once), or the server is stopped with "immediate" and started.  Every
# other crash strikes while the streams are held with a round's records
# unread (a backlog whatever the machine's speed), the rest at a random
# moment while they work through it.  At the end an order and its
# payment far later in event time move the watermark past every other
# row, so the left join gives the NULL row of every order that never
# matched.  Then:
#   - each sink equals the same join over all records in plain tables
#     (EXCEPT ALL both ways): every matching pair exactly once, every
#     unmatched order's NULL row exactly once, none for a matched one;
#   - no row was late (event times on each topic are in order up to less
#     than the delay), so nothing was dropped;
#   - the state tables are intact: no stored row was removed twice (the
#     committed batches' numRowsRemoved add up to at most the rows of that
#     side: a row that the watermark the batch leaves evicts at once is
#     never stored, so fewer when a batch spans more event time, which
#     depends on how records fall into batches), only the last order and
#     payment are still stored, and the NULL rows counted equal the
#     unmatched orders (those rows are always stored).
#
# Random choices (the crash plan, the delays, which orders have payments
# and when) come from the seed printed at the start; STREAMING_TEST_SEED=N
# replays them (timing aside).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use List::Util qw(shuffle);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamingTest;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = test_seed();
my @kinds = shuffle(('kill_worker') x 4, ('kill_postmaster') x 2, ('immediate') x 2);
note "crash plan: @kinds";
my $rounds = @kinds;
my $per_round = 700;

my $kafka = StreamingTest::Kafka->start;
my ($orders_topic) = $kafka->create_topic('orders_021', 1);
my ($payments_topic) = $kafka->create_topic('payments_021', 1);

my $node = streaming_node('main');
orders_payments_sources($node, $kafka, $orders_topic, $payments_topic, 150);
my $watermarks = q{'{"o": {"event_time": "order_time", "delay": "1 hour"},
                    "p": {"event_time": "payment_time", "delay": "1 hour"}}'};
my %query = (
	paid => 'JOIN',
	orders_left => 'LEFT JOIN');
for my $stream (sort keys %query)
{
	$node->safe_psql('postgres',
		"SELECT streaming.create_stream('$stream', \$\$SELECT o.order_id, o.amount, p.payment_id, p.payment_time
		   FROM orders_src o $query{$stream} payments_src p
		     ON p.order_id = o.order_id
		    AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes'\$\$,
		 watermarks => $watermarks)");
}
my @streams = sort keys %query;

# orders one second apart; most have a payment 0-30 minutes later, some
# none, some a second one, some only one outside the 30 minutes (before
# the order, or after): those orders get a NULL row
my $next_order = 1;
my $base = 1_704_067_200;    # 2024-01-01 00:00:00 UTC
my ($norders, $npayments) = (0, 0);

sub produce_round
{
	my ($n, %opts) = @_;
	my (@o, @p);
	for (1 .. $n)
	{
		my $id = $next_order++;
		my $t = $opts{at} // $base + $id;
		push @o, sprintf('{"order_id": %d, "amount": %.2f, "order_time": "%s"}', $id, 1 + rand(500), iso_utc($t));
		my $r = rand();
		my @delays =
		    $opts{at} ? (0)
		  : $r < 0.08 ? ()
		  : $r < 0.12 ? (-60)
		  : $r < 0.16 ? (1801 + int(rand(600)))
		  : $r < 0.24 ? (int(rand(1801)), int(rand(1801)))
		  : (int(rand(1801)));
		my $k = 0;
		push @p, map { sprintf('{"payment_id": %d, "order_id": %d, "payment_time": "%s"}', $id * 10 + $k++, $id, iso_utc($t + $_)) }
		  @delays;
	}
	# payments of a round in order of their orders, not of their times
	$kafka->produce_lines($orders_topic, \@o);
	$kafka->produce_lines($payments_topic, \@p) if @p;
	$node->safe_psql('postgres',
		"INSERT INTO orders_in SELECT d::jsonb FROM unnest(" . sql_array(\@o) . "::text[]) d");
	$node->safe_psql('postgres',
		"INSERT INTO payments_in SELECT d::jsonb FROM unnest(" . sql_array(\@p) . "::text[]) d")
	  if @p;
	$norders += @o;
	$npayments += @p;
	return;
}

sub last_batch
{
	my ($stream) = @_;
	return query_retry($node,
		"SELECT coalesce(last_batch_id, -1) FROM streaming.streams WHERE name = '$stream'");
}

produce_round($per_round);
my ($kills, $with_backlog, $held_rounds, $held_with_backlog) = (0, 0, 0, 0);
for my $round (1 .. $rounds)
{
	my $kind = $kinds[ $round - 1 ];

	# a backlog of several batches on both topics, there before the next
	# batch is planned (hold_streams)
	my $hold = hold_streams($node, 'other_source IS NOT NULL');
	produce_round($per_round);

	# even rounds strike while the streams are still held, so the whole
	# round is waiting however fast the machine works through it (a
	# worker killed there dies in its batch's transaction); odd rounds
	# strike at a random moment while the streams work through it.  What
	# they have done is asked in the session already open (a new
	# connection of a loaded machine takes longer than the backlog).
	my $held = $round % 2 == 0;
	$held_rounds++ if $held;
	if (!$held)
	{
		$hold->query_safe('COMMIT');
		usleep(int(rand(300_000)));
	}
	my $victim = $streams[ $round % @streams ];
	# a backlog: a stream has not read all records produced so far
	my ($backlog, @state) = split / /, $hold->query_safe(
		"SELECT coalesce(bool_or(o.position < $norders OR p.position < $npayments), false)::text || ' ' ||
		        string_agg(s.name || '=' || coalesce(s.last_batch_id, -1) || '=' || coalesce(s.worker_pid, 0), ' ')
		 FROM streaming.streams s JOIN streaming.stream_defs d USING (name)
		 LEFT JOIN streaming.positions o ON o.stream_id = d.id AND o.source = 'orders_src'
		 LEFT JOIN streaming.positions p ON p.stream_id = d.id AND p.source = 'payments_src'
		 WHERE s.name IN ('paid', 'orders_left')");
	# (a held round's session goes down with the crash below)
	$hold->quit unless $held;
	my %before = map { (split /=/)[ 0, 1 ] } @state;
	my %pid_of = map { (split /=/)[ 0, 2 ] } @state;
	$with_backlog++ if $backlog eq 'true';
	$held_with_backlog++ if $held && $backlog eq 'true';
	my $pid = '';
	if ($kind eq 'kill_worker')
	{
		$pid = $pid_of{$victim};
		if (!$pid)
		{
			# between two workers: the next one
			wait_for($node,
				"SELECT worker_pid IS NOT NULL FROM streaming.streams WHERE name = '$victim'",
				't', "round $round: $victim has a worker", $victim);
			$pid = stream_row($node, $victim)->{worker_pid};
		}
		note "round $round: kill -9 of worker $pid of $victim after batch $before{$victim}";
		ok(kill('KILL', $pid), "round $round: killed worker $pid");
		$kills++;
	}
	elsif ($kind eq 'kill_postmaster')
	{
		my $pm_pid = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
		note "round $round: kill -9 of the postmaster $pm_pid";
		ok(kill('KILL', $pm_pid), "round $round: killed the postmaster");
		# started again at once: until its orphaned children are gone
		# (they exit when they see the postmaster die), the shared memory
		# is still in use and the new postmaster refuses to start
		my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
		usleep(10_000) while kill(0, $pm_pid) && time() < $deadline;
		$node->_update_pid(-1);    # the node's postmaster.pid is stale now
		until ($node->start(fail_ok => 1))
		{
			BAIL_OUT('the server did not start after the postmaster was killed') if time() > $deadline;
			usleep(100_000);
		}
	}
	else
	{
		note "round $round: immediate stop";
		$node->stop('immediate');
		$node->start;
	}

	$hold->quit if $held;    # its server process died in the crash

	# every stream runs again, in a new worker, and makes progress (or has
	# caught up)
	for my $stream (@streams)
	{
		wait_for($node,
			"SELECT coalesce(last_batch_id, -1) > $before{$stream} OR lag = 0 FROM streaming.streams WHERE name = '$stream'",
			't', "round $round ($kind): $stream makes progress", $stream);
		my $new_worker = $pid eq '' ? '' : " AND worker_pid <> $pid";
		wait_for($node,
			"SELECT status = 'running' AND worker_pid IS NOT NULL$new_worker FROM streaming.streams WHERE name = '$stream'",
			't', "round $round: $stream runs again, in a worker", $stream);
	}
}
note "$with_backlog of $rounds crashes struck while records were waiting";
is($held_with_backlog, $held_rounds, 'every crash while the streams were held struck with records waiting');

# the final flush: an order and its payment a day later move the
# watermark past every other row
my $flush = $next_order;
produce_round(1, at => $base + $flush + 86_400);
is($node->safe_psql('postgres', "SELECT count(*) FROM payments_all WHERE order_id = $flush"),
	'1', 'the last order has its payment');
for my $stream (@streams)
{
	my $expected = $node->safe_psql('postgres', "SELECT count(*) FROM ${stream}_expected");
	wait_for($node, "SELECT count(*) >= $expected FROM $stream", 't',
		"$stream: the sink has its $expected rows", $stream);
	wait_for($node,
		"SELECT lag = 0 AND watermark > '2024-01-02' FROM streaming.streams WHERE name = '$stream'",
		't', "$stream: caught up, the watermark past every other row", $stream);
	# the no-data batch after the last one, if it is still to come
	wait_for($node,
		"SELECT num_input_rows = 0 FROM streaming.progress WHERE stream = '$stream' ORDER BY batch_id DESC LIMIT 1",
		't', "$stream: the last batch is the no-data batch", $stream);
}

my $unmatched = $node->safe_psql('postgres',
	"SELECT count(*) FROM orders_left_expected WHERE payment_id IS NULL");
note "$norders orders, $npayments payments, $unmatched orders without a payment in time";
ok($unmatched > 0, 'some orders have no payment in time');
for my $stream (@streams)
{
	my $what = "$stream after $rounds crashes";
	is( $node->safe_psql('postgres',
			"SELECT (SELECT count(*) FROM (TABLE $stream EXCEPT ALL TABLE ${stream}_expected) a) || '/' ||
			        (SELECT count(*) FROM (TABLE ${stream}_expected EXCEPT ALL TABLE $stream) b)"),
		'0/0', "$what: the sink is the join over all records, every row exactly once");
	is($node->safe_psql('postgres',
			"SELECT coalesce(sum(num_late_rows), 0) FROM streaming.progress WHERE stream = '$stream'"),
		'0', "$what: no row was late");
	my $id = $node->safe_psql('postgres', "SELECT id FROM streaming.stream_defs WHERE name = '$stream'");
	is( $node->safe_psql('postgres',
			"SELECT (SELECT string_agg(order_id::text, ',') FROM streaming.join_${id}_left) || '/' ||
			        (SELECT string_agg(order_id::text, ',') FROM streaming.join_${id}_right)"),
		"$flush/$flush", "$what: only the last order and its payment are still stored");
	my ($removed_o, $removed_p, $null_rows) = split /\|/, $node->safe_psql('postgres',
		"SELECT sum((state_operators->'o'->>'numRowsRemoved')::bigint),
		        sum((state_operators->'p'->>'numRowsRemoved')::bigint),
		        sum((state_operators->'o'->>'numNullRows')::bigint)
		 FROM streaming.progress WHERE stream = '$stream'");
	note "$what: $removed_o orders and $removed_p payments removed from the state";
	ok($removed_o <= $norders - 1 && $removed_p <= $npayments - 1,
		"$what: no stored row was removed twice ($removed_o of " . ($norders - 1) . " orders, $removed_p of " . ($npayments - 1) . " payments)");
	is($null_rows, $stream eq 'orders_left' ? $unmatched : 0, "$what: the NULL rows counted");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM (SELECT FROM $stream WHERE payment_id IS NULL GROUP BY order_id HAVING count(*) > 1) d"),
		'0', "$what: no order has two NULL rows");
	my $row = stream_row($node, $stream);
	is($row->{status}, 'running', "$what: the stream is still running");
}
is($node->safe_psql('postgres',
		"SELECT count(*) FROM orders_left o WHERE payment_id IS NULL AND EXISTS (SELECT FROM paid p WHERE p.order_id = o.order_id)"),
	'0', 'no order that matched has a NULL row');

# the crashes really were crashes
my $log = slurp_file($node->logfile);
my $signal_9 = () = $log =~ /terminated by signal 9: Killed/g;
is($signal_9, $kills, 'the postmaster saw every killed worker');
my $recoveries = () = $log =~ /automatic recovery in progress/g;
ok($recoveries >= $rounds, "the server recovered after every crash ($recoveries)");

$node->stop;
done_testing();
