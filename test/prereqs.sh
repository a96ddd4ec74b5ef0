#!/usr/bin/env bash
# test/prereqs.sh [demo|test]: install the Debian packages that building the
# extension and running the demo (or the tests) need, if any is missing.
#
# The one list of what the project needs from the system; `make demo`,
# `make test` and .ci/run all call this script.  What it does:
#   - nothing, when every package is installed;
#   - as root: apt-get update and apt-get install of the missing ones;
#   - as another user: the same with `sudo -n` (no password prompt), when
#     sudo allows it;
#   - otherwise: one message that lists the missing packages and the one
#     apt-get command to run, and exit status 1.
# On a system without dpkg it checks nothing and says so.

set -u

# Building, the demo and every test.
packages=(
	build-essential pkg-config
	postgresql-15 postgresql-server-dev-15	# server; PGXS, pg_regress, Perl test modules
	librdkafka-dev							# Kafka client library (and its mock cluster)
	libavro-dev libcurl4-openssl-dev		# Avro C (format avro); the schema registry's client
	kcat									# produces and reads test data
)
# Only the tests.
test_packages=(
	libipc-run-perl							# TAP tests (PostgreSQL::Test::Cluster)
	postgresql-15-tdigest postgresql-15-hll	# other extensions' aggregates in streams
	python3-avro							# test/avro_encode.py: Avro records by another implementation
)

case ${1:-test} in
	demo) ;;
	test) packages+=("${test_packages[@]}") ;;
	*) echo "usage: $0 [demo|test]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null; then
	echo "$(basename "$0"): not a Debian system; make sure these (or their equivalents) are installed: ${packages[*]}" >&2
	exit 0
fi

missing=()
for p in "${packages[@]}"; do
	if [ "$(dpkg-query -W -f '${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
	sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
	sudo=(sudo -n)
else
	{
		echo "$(basename "$0"): these Debian packages are missing: ${missing[*]}"
		echo "Install them (as root) with:"
		echo "    apt-get install -y ${missing[*]}"
	} >&2
	exit 1
fi

echo "Installing missing packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q &&
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q "${missing[@]}" </dev/null || {
	echo "$(basename "$0"): apt-get could not install: ${missing[*]}" >&2
	exit 1
}
