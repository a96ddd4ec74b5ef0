#!/usr/bin/env bash
# test/old_version.sh VERSION DEST: build an earlier release of the extension
# from git history into a private PostgreSQL installation in DEST, and print
# the directory above its bin/ and lib/ (what PostgreSQL::Test::Cluster's
# install_path wants).  test/run-tests.sh calls it for test/t/008_upgrade.pl.
#
# The release's commit comes from test/releases; its sources are taken with
# `git archive` from the checkout's git history, built with the system's
# pg_config, and installed with `make install DESTDIR=DEST` into a copy of
# the PostgreSQL tree, as test/pg_env.sh makes the private installation of
# the checkout itself.
#
# Exit status: 0 when built; 2 when the checkout has no git history of that
# commit (not a git checkout, or a shallow clone: the message says so, and
# the test is skipped); 1 for anything else (a build that fails).

set -u
. "$(dirname "${BASH_SOURCE[0]}")/pg_env.sh"

if [ $# -ne 2 ]; then
	echo "usage: $0 VERSION DEST" >&2
	exit 1
fi
version=$1
dest=$2
umask 022

commit=$(awk -v v="$version" '$1 == v { print $2 }' "$STM_SRC/test/releases")
if [ -z "$commit" ]; then
	stm_err "version $version is not in test/releases"
	exit 1
fi
if ! err=$(git -C "$STM_SRC" cat-file -e "$commit^{commit}" 2>&1); then
	stm_err "release $version (commit $commit) is not in the git history of $STM_SRC${err:+ ($err)}: not a git checkout, or a shallow clone (git fetch --unshallow gets the history)"
	exit 2
fi

build=$(mktemp -d "${TMPDIR:-/tmp}/streaming-$version.XXXXXX") || exit 1
trap 'rm -rf "$build"' EXIT
if ! git -C "$STM_SRC" archive "$commit" | tar -x -C "$build"; then
	stm_err "git archive of $commit failed"
	exit 1
fi
mkdir -p "$dest" || exit 1
stm_make_installation "$build" "$dest" "$dest/install.log" || exit 1
echo "$dest$(dirname "$("$PG_CONFIG" --bindir)")"
