#!/usr/bin/env bash
# bench/compare.sh: two builds of the extension, measured in one run.
#
#   bench/compare.sh [--base REV] [--runs N] [--] [bench/run.sh arguments]
#
# Builds private installations (test/pg_env.sh's stm_make_installation: a
# copy of the system PostgreSQL 15 tree with the extension installed into
# it, nothing installed into the system) of
#
#   base   the commit REV (default main), from `git archive`
#   new    the checkout as it is (uncommitted changes included)
#
# then runs bench/run.sh (the checkout's, with the arguments given: the
# stateless benchmark by default, --aggregate, --latency RATES, ...) N times
# for each (default 3), interleaved: base new, new base, base new, ...  so
# that the machine's other work falls on both alike.  Each run is a whole
# run.sh: its own data, mock broker and server; COPY and the Python loop are
# measured again in every run, so each run's ratios compare things measured
# minutes apart at most.
#
# Prints every run's figures, then per build the median and the range
# (min..max) of each: records/s of (1) the stream, (2) COPY (or COPY +
# GROUP BY), (3) the Python loop, the ratios stream/COPY and stream/python,
# the worker's CPU seconds and peak RSS; with --latency, per rate the p50,
# p99 and max latency and the batches.  The machine's load average is shown
# before and after.  run.sh's full reports are kept in the output directory
# (--out DIR, default a new temp dir), whose name is printed.
#
# As root (runs servers as user postgres).  Needs what run.sh needs.

set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$BENCH/.." && pwd)
BASE=main
RUNS=3
OUT=

while [ $# -gt 0 ]; do
	case $1 in
		--base) BASE=${2:-}; shift 2 || exit 2 ;;
		--runs) RUNS=${2:-}; shift 2 || exit 2 ;;
		--out) OUT=${2:-}; shift 2 || exit 2 ;;
		--) shift; break ;;
		-h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
		*) break ;;
	esac
done
case $RUNS in ''|*[!0-9]*|0) echo "bench/compare.sh: --runs wants a positive integer" >&2; exit 2 ;; esac

# the installations' helpers (stm_make_installation, stm_make)
. "$SRC/test/pg_env.sh"

say() { printf '%s\n' "$*" >&2; }
die() { say "bench/compare.sh: $*"; exit 1; }

BASE_SHA=$(git -c safe.directory="$SRC" -C "$SRC" rev-parse --short "$BASE") || die "no commit $BASE"
NEW_DESC=$(git -c safe.directory="$SRC" -C "$SRC" rev-parse --short HEAD)
[ -n "$(git -c safe.directory="$SRC" -C "$SRC" status --porcelain --untracked-files=no)" ] &&
	NEW_DESC="$NEW_DESC + uncommitted changes"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/streaming-compare.XXXXXX") || die "mktemp failed"
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/streaming-compare-out.XXXXXX")
mkdir -p "$OUT"

say "building base ($BASE = $BASE_SHA) and new ($NEW_DESC)"
mkdir -p "$WORK/src-base" "$WORK/src-new"
git -c safe.directory="$SRC" -C "$SRC" archive "$BASE_SHA" | tar -C "$WORK/src-base" -xf - ||
	die "git archive $BASE failed"
tar -C "$SRC" -cf - --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
	--exclude=./tmp_check --exclude=./tmp_check_iso --exclude=./results --exclude=./log . |
	tar -C "$WORK/src-new" -xf - || die "copying the checkout failed"
for v in base new; do
	stm_make_installation "$WORK/src-$v" "$WORK/inst-$v" "$WORK/install-$v.log" ||
		die "the $v build failed (see above)"
done
[ -x "$SRC/test/mock_broker" ] || stm_make -C "$SRC" test/mock_broker >/dev/null ||
	die "could not build test/mock_broker"
pgc() { echo "$WORK/inst-$1$("$PG_CONFIG" --bindir)/pg_config"; }

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq "$RUNS"); do
	order="base new"
	[ $((i % 2)) = 0 ] && order="new base"
	for v in $order; do
		say "run $i/$RUNS: $v"
		PG_CONFIG=$(pgc "$v") "$BENCH/run.sh" --no-install "$@" >"$OUT/$v.$i.txt" 2>"$OUT/$v.$i.err" ||
			{ tail -n 20 "$OUT/$v.$i.err" "$OUT/$v.$i.txt" >&2; die "run $i of $v failed (reports in $OUT)"; }
	done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# figures FILE: "name value" lines of one report
figures()
{
	awk '
		/^\(1\) streaming/ { n = split($0, f, "  +"); for (i = 1; i <= n; i++) if (f[i] ~ /^[0-9,]+$/ && f[i] ~ /,/) { gsub(",", "", f[i]); print "stream_rps", f[i]; break }
			for (i = 1; i <= n; i++) if (f[i] ~ /^[0-9.]+$/ && f[i] ~ /\./) { cpu = f[i] }
			if (match($0, /[0-9]+ MB worker/)) print "worker_rss_mb", substr($0, RSTART, RLENGTH - 10) }
		/^\(2\) COPY/ { n = split($0, f, "  +"); for (i = 1; i <= n; i++) if (f[i] ~ /^[0-9,]+$/ && f[i] ~ /,/) { gsub(",", "", f[i]); print "copy_rps", f[i]; break } }
		/^\(3\) / && !/not run/ { n = split($0, f, "  +"); for (i = 1; i <= n; i++) if (f[i] ~ /^[0-9,]+$/ && f[i] ~ /,/) { gsub(",", "", f[i]); print "python_rps", f[i]; break } }
		/^stream \/ (COPY|\(COPY)/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+$/) { print "ratio_copy", $i; break } }
		/^stream \/ python/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+$/) { print "ratio_python", $i; break } }
		/^\(1\)'"'"'s worker, main thread:/ { print "worker_on_cpu_s", $5; print "worker_runq_s", $10 }
		/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ / {
			print "r" $1 "_p50_ms", $4; print "r" $1 "_p90_ms", $5; print "r" $1 "_p99_ms", $6; print "r" $1 "_max_ms", $7
			print "r" $1 "_batches", $8; print "r" $1 "_ms_per_batch", $10; print "r" $1 "_worker_cpu_s", $12 }
	' "$1"
	# the worker CPU column of (1): the 4th field after the name
	awk '/^\(1\) streaming/ { sub(/^\(1\) streaming:[^0-9]*/, ""); split($0, f, " +"); print "worker_cpu_s", f[3] }' "$1"
}

for f in "$OUT"/*.txt; do
	figures "$f" >"${f%.txt}.fig"
done

{
	echo "bench/compare.sh: bench/run.sh $*"
	echo "base = $BASE ($BASE_SHA), new = $NEW_DESC; $RUNS runs each, interleaved; nproc $(nproc)"
	echo "load average before $LOAD_BEFORE, after $LOAD_AFTER; reports in $OUT"
	echo
	names=$(cat "$OUT"/*.fig | awk '{ print $1 }' | awk '!seen[$0]++')
	printf '%-22s' "figure"
	for v in base new; do printf ' %-32s' "$v: median (min..max)"; done
	printf ' %s\n' "every run (base | new)"
	for n in $names; do
		printf '%-22s' "$n"
		for v in base new; do
			cat "$OUT"/$v.*.fig | awk -v n="$n" '$1 == n { print $2 }' | sort -g |
				awk 'function f(x) { return x == int(x) ? sprintf("%d", x) : sprintf("%.2f", x) }
					{ a[NR] = $1 } END { if (NR == 0) { printf " %-32s", "-"; exit }
					m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
					printf " %-32s", sprintf("%s (%s..%s)", f(m), f(a[1]), f(a[NR])) }'
		done
		printf ' '
		for v in base new; do
			for i in $(seq "$RUNS"); do
				awk -v n="$n" '$1 == n { printf "%s ", $2 }' "$OUT/$v.$i.fig"
			done
			[ $v = base ] && printf '| '
		done
		echo
	done
	echo
	echo "load average (1 min) at each run's start is in its report ($OUT/<build>.<run>.txt)"
}
