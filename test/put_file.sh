#!/bin/sh
# test/put_file.sh NAME [MTIME]: a file for the file-source tests.  Writes
# stdin to $FS_DIR/.NAME.part (a name the file source ignores), sets its
# modification time to MTIME (touch -d; default "1 hour ago": settled, with
# streaming.file_settle_time far smaller), and renames it to $FS_DIR/NAME,
# as a writer that never shows a partial file does.  NAME may hold a
# subdirectory (made when missing).  The regress tests run it with \!
# (psql's cwd is the checkout), with FS_DIR set by \setenv.
set -e
: "${FS_DIR:?FS_DIR must name the test directory}"
name=$1
when=${2:-1 hour ago}
dir=$(dirname "$FS_DIR/$name")
mkdir -p "$dir"
part="$dir/.$(basename "$name").part"
cat >"$part"
touch -d "$when" "$part"
mv "$part" "$FS_DIR/$name"
