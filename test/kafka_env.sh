# test/kafka_env.sh -- Kafka for test and demo scripts.  Source it:
#
#	. "$repo/test/kafka_env.sh"
#	kafka_start [mock_broker args...] || exit 1
#	trap kafka_stop EXIT
#	kafka_create_topic orders 32
#	kafka_produce orders <orders.json
#
# If KAFKA_BOOTSTRAP_SERVERS is set, that (real) broker is used.  Otherwise
# kafka_start runs test/mock_broker (librdkafka's mock cluster; "make" builds
# it; $MOCK_BROKER overrides its path) in the background.
#
# kafka_start [ARGS...]  exports BOOTSTRAP (and MOCK_BROKER_PID, KAFKA_MOCK_DIR
#	for the mock).  ARGS go to mock_broker (e.g. --brokers 3 --topic t:8);
#	with a real broker, --topic NAME:PARTITIONS is done by kafka_create_topic
#	and other ARGS are ignored.  Call it in the main shell, not in $(...).
# kafka_stop  stops the mock if kafka_start started it (else does nothing).
# kafka_create_topic NAME PARTITIONS
#	mock: sends "create" to the mock's command fifo; a topic that already
#	exists (the mock auto-creates any topic a client merely looks up, with 4
#	partitions) is accepted only if its partition count matches.
#	real broker: kafka-topics.sh (or kafka-topics) --if-not-exists if on
#	PATH; otherwise it relies on the broker auto-creating the topic, with the
#	broker's default partition count, and says so on stderr.
#	Do not run several of these concurrently against one mock.
# kafka_produce TOPIC [kcat args...]  produces stdin, one message per line,
#	with settings that make a million lines take a few seconds; keyless
#	lines are spread randomly (sticky partitioning off) so that no partition
#	exceeds the mock's 5 MiB per-partition limit and loses old data.
#
# Everything is safe under "set -u" and "set -e" (functions return status).
# The mock can be taken down/up with: kill -USR1/-USR2 "$MOCK_BROKER_PID".

_KAFKA_ENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# True while process $1 exists and is not a zombie.
_kafka_running()
{
	local st=
	kill -0 "$1" 2>/dev/null || return 1
	if [ -r "/proc/$1/stat" ]; then
		read -r _ _ st _ <"/proc/$1/stat" 2>/dev/null || true
	fi
	[ "$st" != Z ]
}

kafka_start()
{
	local bin=${MOCK_BROKER:-$_KAFKA_ENV_DIR/mock_broker} dir i arg

	if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
		export BOOTSTRAP=$KAFKA_BOOTSTRAP_SERVERS
		while [ $# -gt 0 ]; do
			arg=$1; shift
			if [ "$arg" = --topic ] && [ $# -gt 0 ]; then
				kafka_create_topic "${1%:*}" "${1##*:}" || return 1
				shift
			fi
		done
		return 0
	fi

	if [ -n "${MOCK_BROKER_PID:-}" ] && _kafka_running "$MOCK_BROKER_PID"; then
		echo "kafka_start: mock broker already running (pid $MOCK_BROKER_PID)" >&2
		return 1
	fi
	if [ ! -x "$bin" ]; then
		echo "kafka_start: $bin not found; run \"make\" first" >&2
		return 1
	fi

	dir=$(mktemp -d "${TMPDIR:-/tmp}/mock_broker.XXXXXX") || return 1
	mkfifo "$dir/cmd" || { rm -rf "$dir"; return 1; }
	export KAFKA_MOCK_DIR=$dir

	# The mock opens its command fifo read-write, so it never sees EOF and
	# each kafka_create_topic can open and close the fifo on its own.
	"$bin" --stdin --bootstrap-file "$dir/bootstrap" "$@" \
		<>"$dir/cmd" >"$dir/out" 2>"$dir/log" &
	export MOCK_BROKER_PID=$!

	for ((i = 0; i < 200; i++)); do		# at most 10 s
		if [ -s "$dir/bootstrap" ]; then
			read -r BOOTSTRAP <"$dir/bootstrap" || true
			export BOOTSTRAP
			return 0
		fi
		_kafka_running "$MOCK_BROKER_PID" || break
		sleep 0.05	# poll interval
	done

	echo "kafka_start: mock broker did not start:" >&2
	cat "$dir/log" >&2 || true
	kafka_stop
	return 1
}

kafka_stop()
{
	local pid=${MOCK_BROKER_PID:-} i

	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do		# at most 5 s
			_kafka_running "$pid" || break
			sleep 0.05	# poll interval
		done
		if _kafka_running "$pid"; then
			echo "kafka_stop: mock broker $pid ignored SIGTERM; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true		# reap it if it is our child
		unset MOCK_BROKER_PID
	fi
	if [ -n "${KAFKA_MOCK_DIR:-}" ]; then
		rm -rf "$KAFKA_MOCK_DIR"
		unset KAFKA_MOCK_DIR
	fi
	return 0
}

kafka_create_topic()
{
	local topic=${1:?usage: kafka_create_topic NAME PARTITIONS}
	local parts=${2:?usage: kafka_create_topic NAME PARTITIONS}
	local dir=${KAFKA_MOCK_DIR:-} tool n i resp have

	if [ -z "$dir" ]; then
		: "${BOOTSTRAP:?kafka_create_topic: call kafka_start first}"
		tool=$(command -v kafka-topics.sh || command -v kafka-topics || true)
		if [ -z "$tool" ]; then
			echo "kafka_create_topic: no kafka-topics.sh on PATH; relying on" \
				"auto-creation of \"$topic\" by the broker (broker's default" \
				"partition count, not $parts)" >&2
			return 0
		fi
		"$tool" --bootstrap-server "$BOOTSTRAP" --create --if-not-exists \
			--topic "$topic" --partitions "$parts" || return 1
		return 0
	fi

	n=$(wc -l <"$dir/out")
	printf 'create %s %s\n' "$topic" "$parts" >"$dir/cmd" || return 1
	resp=
	for ((i = 0; i < 100; i++)); do		# at most 5 s
		resp=$(sed -n "$((n + 1))p" "$dir/out")
		[ -n "$resp" ] && break
		sleep 0.02	# poll interval
	done
	case $resp in
		ok)
			return 0 ;;
		*"already exists"*)
			have=$(kcat -L -b "$BOOTSTRAP" -t "$topic" 2>/dev/null |
				sed -n "s/^ *topic \"$topic\" with \([0-9]*\) partitions.*/\1/p")
			[ "$have" = "$parts" ] && return 0
			echo "kafka_create_topic: topic \"$topic\" already exists with" \
				"${have:-?} partitions, not $parts" >&2
			return 1 ;;
		"")
			echo "kafka_create_topic: no answer from the mock broker" >&2
			return 1 ;;
		*)
			echo "kafka_create_topic: $resp" >&2
			return 1 ;;
	esac
}

kafka_produce()
{
	local topic=${1:?usage: kafka_produce TOPIC [kcat args...]}
	shift
	: "${BOOTSTRAP:?kafka_produce: call kafka_start first}"
	kcat -P -b "$BOOTSTRAP" -t "$topic" \
		-X queue.buffering.max.messages=1000000 \
		-X linger.ms=50 \
		-X sticky.partitioning.linger.ms=0 \
		"$@"
}
