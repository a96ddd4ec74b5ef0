#!/bin/sh
# test/avro_produce.sh TOPIC SCHEMA [avro_encode.py options]: the JSON lines
# on stdin as Avro records in the wire format (test/avro_encode.py, with the
# schema registered under TOPIC-value unless --id is given) into partition
# 0 of TOPIC, with kcat.  The broker is $KAFKA_BOOTSTRAP, the registry
# $SCHEMA_REGISTRY (as the regress tests have them); SCHEMA is a file or
# the schema's JSON.  With --key-subject and --key-schema each line is
# {"key": K, "value": V}, and a null value a tombstone.
set -e
topic=$1 schema=$2
shift 2
case " $* " in
	*" --key-schema "*) keyed="-K <<<end-of-avro-key-5c1e>>> -Z" ;;
	*) keyed= ;;
esac
case " $* " in
	*" --id "*) subject= ;;
	*) subject="--subject $topic-value" ;;
esac
# shellcheck disable=SC2086 # options, one per word
"$(dirname "$0")/avro_encode.py" --registry "$SCHEMA_REGISTRY" $subject --schema "$schema" "$@" |
	kcat -P -b "$KAFKA_BOOTSTRAP" -t "$topic" -p 0 -D '<<<end-of-avro-record-5c1e>>>' $keyed
