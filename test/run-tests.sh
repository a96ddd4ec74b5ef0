#!/usr/bin/env bash
# test/run-tests.sh: what `make test` runs.
#
# Runs the regress tests (sql/, expected/), then the isolation tests
# (test/isolation/), then the TAP tests (test/t/), each on private servers
# started from a private copy of PostgreSQL with the extension installed
# (test/pg_env.sh): no `make install` into the system is needed.  As root,
# the tests run as user postgres on a copy of the checkout that it owns.
#
# Which tests: the Makefile's REGRESS, ISOLATION, TAP_TESTS and PROVE_TESTS;
# make's command line and the environment override them, e.g.
#     make test REGRESS=stateless ISOLATION= PROVE_TESTS=test/t/001_worker.pl
# PROVE_FLAGS, EXTRA_REGRESS_OPTS, ENCODING and NO_LOCALE work as in PGXS.
#
# A Kafka broker runs for the whole run, its address in $KAFKA_BOOTSTRAP and
# $BOOTSTRAP: the one named by KAFKA_BOOTSTRAP_SERVERS (then KAFKA_RUN_ID,
# unless set, is a suffix unique to this run, for topic names), or else the
# embedded mock broker (test/kafka_env.sh).  So does a schema registry, its
# URL in $SCHEMA_REGISTRY: the one named by SCHEMA_REGISTRY_URL, or else
# test/schema_registry.py (test/registry_env.sh); TAP tests start their own
# unless SCHEMA_REGISTRY_URL is set.
#
# The tests run a build with fault points (make FAULT_INJECTION=1, made in a
# copy of the sources: src/fault.h); the first check ("build") is that the
# checkout's own build, what `make install` installs, has none of them.
#
# When an upgrade test (test/t/*_upgrade.pl) is among the TAP tests, the
# newest release in test/releases is built from the checkout's git history
# into a private installation of its own first (old_release below).
#
# Failures print their diffs and logs; the output of the last run is copied
# back into the checkout (regression.diffs, results/, log/ (server logs),
# test/isolation/results/, tmp_check/log/ (TAP)).  The last line of output is
# "N passed, M failed", counting regress tests, isolation tests and TAP files;
# the exit status is non-zero when anything failed.

set -u
. "$(dirname "${BASH_SOURCE[0]}")/pg_env.sh"
export STM_BUILD_ARGS=${STM_BUILD_ARGS-FAULT_INJECTION=1}

passed=0
failed=0

# summary_exit: clean up, print the summary line last, exit.
summary_exit()
{
	stm_cleanup
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

# The test lists and options: environment first, else the Makefile.
vars=(REGRESS REGRESS_OPTS ISOLATION ISOLATION_OPTS TAP_TESTS PROVE_TESTS
	PROVE_FLAGS EXTRA_REGRESS_OPTS pg_regress_locale_flags)
if ! mkvars=$(stm_make_vars "${vars[@]}"); then
	stm_err "could not read the test lists from the Makefile"
	failed=1
	summary_exit
fi
for v in "${vars[@]}"; do
	if [ -z "${!v+set}" ]; then
		printf -v "$v" '%s' "$(sed -n "s/^$v=//p" <<<"$mkvars")"
	fi
done
read -r -a regress_tests <<<"$REGRESS"
read -r -a isolation_tests <<<"$ISOLATION"
tap_files=()
if [ -n "$TAP_TESTS" ]; then
	# PROVE_TESTS: file names and globs relative to the checkout, as in
	# PGXS; a glob that matches nothing names no test.
	tap_files=($(cd "$STM_SRC" && shopt -s nullglob && echo $PROVE_TESTS))
fi
planned=$((1 + ${#regress_tests[@]} + ${#isolation_tests[@]} + ${#tap_files[@]}))

# Setup; if it fails, no test has passed.
setup()
{
	stm_setup || return 1
	work=$STM_TMP/work
	stm_copy_checkout "$work" || return 1
	mkdir -p "$STM_TMP/tmp"
	[ "$(id -u)" = 0 ] && chown "$STM_USER:" "$STM_TMP/tmp"
	# Temp files and sockets of pg_regress and TAP go below $STM_TMP too.
	export TMPDIR=$STM_TMP/tmp
	stm_kafka_start || return 1
	if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] && [ -z "${KAFKA_RUN_ID+set}" ]; then
		# A real broker keeps topics between runs: tests that can add
		# this suffix to their topic names read fresh ones.
		export KAFKA_RUN_ID=_$(date +%s)_$$
	fi
	echo "Kafka broker: $BOOTSTRAP"
	stm_registry_start || return 1
	echo "Schema registry: $SCHEMA_REGISTRY"

	echo "PostgreSQL: private copy in $STM_INST, tests run as $STM_USER"
	case " ${tap_files[*]} " in
		*_upgrade.pl\ *) old_release ;;
	esac
	(cd "$STM_SRC" && rm -rf regression.diffs regression.out results log \
		test/isolation/results tmp_check tmp_check_iso)
	return 0
}

# old_release: the upgrade test starts from the newest release in
# test/releases, built from git history by test/old_version.sh into a
# private installation of its own.  The test learns the version and where
# it is from STREAMING_UPGRADE_FROM and STREAMING_UPGRADE_FROM_INSTALL, or
# why there is none from STREAMING_UPGRADE_FROM_SKIP (no git history: it
# skips) or STREAMING_UPGRADE_FROM_ERROR (the build failed: it fails).
old_release()
{
	local version path rc log

	version=$(awk '!/^#/ && NF { v = $1 } END { print v }' "$STM_SRC/test/releases")
	export STREAMING_UPGRADE_FROM=$version
	log=$STM_TMP/old-$version.log
	# the system pg_config: PATH starts with the private installation now
	path=$(PG_CONFIG=$PG_CONFIG "$STM_SRC/test/old_version.sh" "$version" \
		"$STM_TMP/old-$version" 2>"$log")
	rc=$?
	if [ $rc -eq 0 ]; then
		export STREAMING_UPGRADE_FROM_INSTALL=$path
		echo "Release $version (for the upgrade test): built from git history in $STM_TMP/old-$version"
	elif [ $rc -eq 2 ]; then
		export STREAMING_UPGRADE_FROM_SKIP=$(tail -n 1 "$log")
		echo "Release $version (for the upgrade test): not built: $STREAMING_UPGRADE_FROM_SKIP"
	else
		tail -n 30 "$log" >&2
		export STREAMING_UPGRADE_FROM_ERROR="test/old_version.sh $version failed: $(tail -n 1 "$log")"
		stm_err "$STREAMING_UPGRADE_FROM_ERROR"
	fi
	return 0
}

if ! setup; then
	stm_err "setup failed, no test was run"
	failed=$((planned > 0 ? planned : 1))
	summary_exit
fi

# The production build (the checkout's, which make install installs) has no
# fault points (nor test_timestamp_fast_path); the test build has them (else
# this check proves nothing).
printf '\n== build ==\n'
prod_lib=$STM_SRC/streaming.so
test_lib=$STM_INST$("$PG_CONFIG" --pkglibdir)/streaming.so
if [ ! -f "$prod_lib" ]; then
	stm_err "build: $prod_lib is missing (run make)"
	failed=$((failed + 1))
elif grep -aq 'streaming\.test_fault' "$prod_lib"; then
	stm_err "build: the production library $prod_lib has streaming.test_fault: it was built with FAULT_INJECTION=1"
	failed=$((failed + 1))
elif grep -aq 'streaming_test_timestamp_fast_path' "$prod_lib"; then
	stm_err "build: the production library $prod_lib has test_timestamp_fast_path: it was built with FAULT_INJECTION=1"
	failed=$((failed + 1))
elif [ -n "$STM_BUILD_ARGS" ] && ! grep -aq 'streaming\.test_fault' "$test_lib"; then
	stm_err "build: the test library $test_lib has no streaming.test_fault"
	failed=$((failed + 1))
else
	echo "ok: the production library has no fault points; the tests run a build with them"
	passed=$((passed + 1))
fi

# collect RELPATH...: copy test output from the work copy into the checkout.
collect()
{
	local p
	for p in "$@"; do
		if [ -d "$work/$p" ]; then
			mkdir -p "$STM_SRC/$p" && cp -R "$work/$p/." "$STM_SRC/$p/"
		elif [ -f "$work/$p" ]; then
			mkdir -p "$(dirname "$STM_SRC/$p")" && cp "$work/$p" "$STM_SRC/$p"
		fi
	done 2>/dev/null
	return 0
}

# last_opt NAME DEFAULT ARGS...: the value of the last --NAME=VALUE in ARGS.
last_opt()
{
	local name=$1 val=$2 a
	shift 2
	for a in "$@"; do
		case $a in --"$name"=*) val=${a#--"$name"=} ;; esac
	done
	echo "$val"
}

# run_pg_regress LABEL PROGRAM NTESTS ARGS...: run pg_regress or
# pg_isolation_regress in the work copy and count its tests.
run_pg_regress()
{
	local label=$1 prog=$2 n=$3 rc p=0 f=0 out summary log
	shift 3
	out=$(last_opt outputdir . "$@")

	printf '\n== %s tests ==\n' "$label"
	(cd "$work" && stm_run "$prog" "$@") 2>&1 | tee "$STM_TMP/$label.out"
	rc=${PIPESTATUS[0]}

	# " All 5 tests passed. ", " 2 of 5 tests failed. ", and variants.
	summary=$(grep -Eo '(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests (passed|failed))' \
		"$STM_TMP/$label.out" | tail -n 1)
	case $summary in
		All*) p=$(awk '{print $2}' <<<"$summary") ;;
		*passed) p=$(awk '{print $1}' <<<"$summary")
			f=$(($(awk '{print $3}' <<<"$summary") - p)) ;;
		*failed) f=$(awk '{print $1}' <<<"$summary")
			p=$(($(awk '{print $3}' <<<"$summary") - f)) ;;
		*) f=$n ;;		# it did not get to run the tests
	esac
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1 && p=$((p > 0 ? p - 1 : 0))
	passed=$((passed + p))
	failed=$((failed + f))

	if [ "$rc" -ne 0 ]; then
		if [ -s "$work/$out/regression.diffs" ]; then
			printf '\n== %s: %s ==\n' "$label" "$out/regression.diffs"
			cat "$work/$out/regression.diffs"
		fi
		# The temp instance's logs: when the tests did not run, the end of
		# the server's log (or of initdb's, if it got no further); else the
		# signs of a crash.
		log=$work/$out/log/postmaster.log
		[ -f "$log" ] || log=$work/$out/log/initdb.log
		if [ ! -f "$log" ]; then
			:
		elif [ -z "$summary" ]; then
			printf '\n== %s: last lines of %s ==\n' "$label" "${log#"$work"/}"
			tail -n 30 "$log"
		elif grep -Eq 'PANIC|TRAP:|terminated by signal' "$log"; then
			printf '\n== %s: crashes in %s ==\n' "$label" "${log#"$work"/}"
			grep -E -B 5 'PANIC|TRAP:|terminated by signal' "$log"
		fi
	fi
	collect "$out/regression.diffs" "$out/regression.out" "$out/results" \
		"$out/log"
}

read -r -a locale_flags <<<"$pg_regress_locale_flags"
read -r -a extra_opts <<<"$EXTRA_REGRESS_OPTS"

if [ ${#regress_tests[@]} -gt 0 ]; then
	read -r -a opts <<<"$REGRESS_OPTS"
	run_pg_regress regress "$STM_PGXS/src/test/regress/pg_regress" \
		${#regress_tests[@]} --inputdir=. --bindir="$STM_BINDIR" \
		"${locale_flags[@]}" "${extra_opts[@]}" "${opts[@]}" "${regress_tests[@]}"
fi

if [ ${#isolation_tests[@]} -gt 0 ]; then
	read -r -a opts <<<"$ISOLATION_OPTS"
	run_pg_regress isolation "$STM_PGXS/src/test/isolation/pg_isolation_regress" \
		${#isolation_tests[@]} --inputdir=. --outputdir=output_iso \
		--bindir="$STM_BINDIR" "${locale_flags[@]}" "${extra_opts[@]}" \
		"${opts[@]}" "${isolation_tests[@]}"
fi

# TAP: as PGXS's prove_installcheck does, with the private bin first on PATH
# (PostgreSQL::Test::Cluster finds initdb, pg_ctl and postgres there).
if [ ${#tap_files[@]} -gt 0 ]; then
	printf '\n== TAP tests ==\n'
	read -r -a prove_flags <<<"$PROVE_FLAGS"
	if ! perl -MIPC::Run -e 1 2>/dev/null; then
		stm_err "the TAP tests need the Perl module IPC::Run (install libipc-run-perl)"
		failed=$((failed + ${#tap_files[@]}))
		tap_files=()
	fi
	(cd "$work" && stm_run rm -rf tmp_check && stm_run mkdir tmp_check)
	for t in "${tap_files[@]}"; do
		(cd "$work" && stm_run env TESTDIR="$work" PGPORT=65432 \
			PG_REGRESS="$STM_PGXS/src/test/regress/pg_regress" \
			PERL5LIB="$STM_PGXS/src/test/perl${PERL5LIB:+:$PERL5LIB}" \
			prove -I "$STM_PGXS/src/test/perl/" -I . "${prove_flags[@]}" "$t")
		if [ $? -eq 0 ]; then
			passed=$((passed + 1))
		else
			failed=$((failed + 1))
			name=$(basename "$t" .pl)
			for log in "$work/tmp_check/log/regress_log_$name" \
				"$work/tmp_check/log/${name}"_*.log; do
				[ -f "$log" ] || continue
				printf '\n== TAP %s: last lines of %s ==\n' "$name" "${log#"$work"/}"
				tail -n 40 "$log"
			done
		fi
	done
	collect tmp_check/log
fi

printf '\n'
if [ "$failed" -gt 0 ]; then
	echo "Diffs and logs of this run are in $STM_SRC: regression.diffs, results/, log/, test/isolation/results/, tmp_check/log/"
fi
summary_exit
