# bench/lib.sh: the start-up the Kafka benchmarks share, sourced once their
# options are read (bench/joins.sh, kafka_sink.sh, avro_cdc.sh,
# nexmark/run.sh).  One place for the server settings they are measured
# with, so that their figures stay comparable.
#
#   bench_init NAME [perf] kcat and python3-confluent-kafka (and linux-perf
#                          with perf) installed when missing (apt-get as
#                          root, as bench/run.sh), test/pg_env.sh's private
#                          installation, say/die
#                          (prefixed NAME), --keep ($KEEP: the temp dir is
#                          kept), the embedded mock broker ($BOOTSTRAP),
#                          an empty data directory $DATA, $LOAD_BEFORE
#   bench_check_topic TOPIC COUNT
#                          every partition of TOPIC starts at offset 0 and
#                          they hold COUNT records in all (the mock keeps
#                          5 MiB per partition and silently drops older data)
#   bench_worker_pid STREAM
#                          its worker's pid, once it runs
#   bench_server_start [CONF]
#                          a server ($PGDATA, $SOCK) with the benchmark
#                          settings below plus CONF (postgresql.conf lines,
#                          later ones win), and psql_do to reach it

BENCH=${BENCH:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
PY=${PYTHON:-/usr/bin/python3}
. "$BENCH/../test/pg_env.sh"

bench_init()
{
	BENCH_NAME=$1
	say() { printf '%s\n' "$*" >&2; }
	die() { say "$BENCH_NAME: $*"; exit 1; }
	local need=()
	command -v kcat >/dev/null || need+=(kcat)
	"$PY" -c 'import confluent_kafka' 2>/dev/null || need+=(python3-confluent-kafka)
	[ "${2:-}" = perf ] && ! command -v perf >/dev/null && need+=(linux-perf)
	if [ ${#need[@]} -gt 0 ]; then
		[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null ||
			die "missing: ${need[*]} (as root: apt-get install ${need[*]})"
		say "installing ${need[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null ||
			die "apt-get install ${need[*]} failed"
	fi
	[ -n "${KEEP:-}" ] && stm_cleanup() { say "kept $STM_TMP"; kafka_stop >/dev/null 2>&1; stm_kill_ours; }
	stm_setup || die "setup failed"
	stm_kafka_start || die "no Kafka broker"
	[ -n "${KAFKA_MOCK_DIR:-}" ] || die "needs the mock broker (unset KAFKA_BOOTSTRAP_SERVERS)"
	DATA=$STM_TMP/data
	mkdir -p "$DATA" && chmod 755 "$DATA" || die "could not make $DATA"
	LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
}

bench_check_topic()
{
	"$PY" "$BENCH/topic_offsets.py" "$BOOTSTRAP" "$1" | awk -v n="$2" -v t="$1" \
		'$2 != 0 { bad++ } { sum += $3 } END { if (bad || sum != n) { printf "%s: %d partitions start past 0, %d of %d records kept\n", t, bad, sum, n > "/dev/stderr"; exit 1 } }'
}

bench_server_start()
{
	PGDATA=$STM_TMP/pgdata
	SOCK=$STM_TMP/sock
	stm_cluster_start "$PGDATA" "$SOCK" "shared_buffers = '1GB'
max_wal_size = '4GB'
fsync = on
max_worker_processes = 16
${1:-}" || die "the server did not start"
	psql_do() { "$STM_BINDIR/psql" -XAtq -v ON_ERROR_STOP=1 -h "$SOCK" -p 5432 -U "$STM_USER" -d postgres "$@"; }
}

# bench_worker_pid STREAM: the pid of STREAM's worker once it runs (waited
# for up to 20 s; fails if it never does)
bench_worker_pid()
{
	local pid i
	for i in $(seq 400); do
		pid=$(psql_do -c "SELECT worker_pid FROM streaming.streams WHERE name = '$1' AND status = 'running'")
		[ -n "$pid" ] && { echo "$pid"; return 0; }
		sleep 0.05
	done
	return 1
}
