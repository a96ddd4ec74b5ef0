#!/usr/bin/python3
"""test/avro_encode.py: JSON records as Avro in the Confluent wire format.

Encodes with Apache Avro's own Python library (Debian's python3-avro), not
with the extension, so that the tests compare two implementations.

  avro_encode.py --registry URL --subject S --schema SCHEMA [options] <lines >messages

SCHEMA is a file or the schema's JSON text.  The schema is registered under
subject S (POST /subjects/S/versions: the id the registry gives it is
used), unless --id N gives the id to write (then nothing is registered:
records of an id the registry does not know).  Each line of stdin is one
record as JSON; values of logical types may be given as text: timestamps
and dates in ISO 8601, times as HH:MM:SS[.ffffff], decimals as strings or
numbers; bytes and fixed as "\\x<hex>" or a string (its UTF-8).  Messages go
to stdout, each followed by the delimiter (--delimiter, default
DELIMITER below), for kcat -P -D.

  --key-subject KS --key-schema KSCHEMA
        each line is {"key": K, "value": V}: the key is encoded with KSCHEMA
        (registered under KS) and written before --key-delimiter (kcat -K);
        a null value is written empty (kcat -Z makes it a tombstone)
  --register-only   register the schema, print its id, encode nothing
  --mangle truncate|extra
                    write each record one byte short, or with one byte more
                    (records Avro cannot read with their schema)
  --latest SUBJECT  print {"id": ID, "schema": SCHEMA} of SUBJECT's latest
                    version on one line, and nothing else (--schema is not needed)
  --basic-auth USER:SECRET   for a registry that wants it
"""
import argparse
import base64
import datetime
import decimal
import io
import json
import struct
import sys
import urllib.request
import warnings

import avro.io
import avro.schema

DELIMITER = b"<<<end-of-avro-record-5c1e>>>"
KEY_DELIMITER = b"<<<end-of-avro-key-5c1e>>>"


def register(url, subject, text, auth):
    req = urllib.request.Request(
        "%s/subjects/%s/versions" % (url.rstrip("/"), urllib.request.quote(subject, safe="")),
        data=json.dumps({"schema": text}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["id"]


def latest(url, subject, auth):
    req = urllib.request.Request(
        "%s/subjects/%s/versions/latest" % (url.rstrip("/"), urllib.request.quote(subject, safe="")))
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def parse_time(s):
    return datetime.datetime.strptime(s, "%H:%M:%S.%f" if "." in s else "%H:%M:%S").time()


def to_python(schema, v):
    """A JSON value as the Python value avro.io writes for schema."""
    if v is None:
        return None
    t = schema.type
    lt = getattr(schema, "logical_type", None)
    if t == "union":
        # the first branch the value fits (records: dicts, arrays: lists, ...)
        for s in schema.schemas:
            if s.type == "null":
                continue
            try:
                py = to_python(s, v)
                if avro.io.validate(s, py):
                    return py
            except (ValueError, TypeError, decimal.InvalidOperation, AttributeError):
                continue
        return v
    if t == "record":
        return {f.name: to_python(f.type, v.get(f.name)) for f in schema.fields if f.name in v}
    if t == "array":
        return [to_python(schema.items, x) for x in v]
    if t == "map":
        return {k: to_python(schema.values, x) for k, x in v.items()}
    if lt == "decimal" and t in ("bytes", "fixed"):
        # avro.io writes the digits as they are: the value must have the schema's scale
        return decimal.Decimal(str(v)).quantize(decimal.Decimal(1).scaleb(-(schema.get_prop("scale") or 0)))
    if t in ("bytes", "fixed") and isinstance(v, str):
        return bytes.fromhex(v[2:]) if v.startswith("\\x") else v.encode()
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    unit = 1000 if lt and lt.endswith("millis") else 1
    if lt in ("timestamp-millis", "timestamp-micros"):
        if isinstance(v, int):
            return epoch + datetime.timedelta(microseconds=v * unit)
        return datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
    if lt == "date":
        if isinstance(v, int):
            return epoch.date() + datetime.timedelta(days=v)
        return datetime.date.fromisoformat(v)
    if lt in ("time-millis", "time-micros"):
        if isinstance(v, int):
            return (datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=v * unit)).time()
        return parse_time(v)
    if t in ("float", "double") and isinstance(v, str):
        return float(v)
    return v


def encode(schema, sid, value):
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, sid))
    avro.io.DatumWriter(schema).write(to_python(schema, value), avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def load_schema(arg):
    text = arg
    if not arg.lstrip().startswith(("{", "[", '"')):
        with open(arg) as f:
            text = f.read()
    return text, avro.schema.parse(text)


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--subject")
    ap.add_argument("--schema")
    ap.add_argument("--latest")
    ap.add_argument("--id", type=int)
    ap.add_argument("--key-subject")
    ap.add_argument("--key-schema")
    ap.add_argument("--register-only", action="store_true")
    ap.add_argument("--mangle", choices=["truncate", "extra"])
    ap.add_argument("--basic-auth")
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    if args.latest:
        got = latest(args.registry, args.latest, args.basic_auth)
        print(json.dumps({"id": got["id"], "schema": json.loads(got["schema"])}, sort_keys=True))
        return 0
    text, schema = load_schema(args.schema)
    sid = args.id if args.id is not None else register(args.registry, args.subject, text, args.basic_auth)
    if args.register_only:
        print(sid)
        return 0
    key_schema = None
    if args.key_schema:
        ktext, key_schema = load_schema(args.key_schema)
        kid = register(args.registry, args.key_subject, ktext, args.basic_auth)
    out = sys.stdout.buffer
    for line in sys.stdin:
        if not line.strip():
            continue
        rec = json.loads(line)
        if key_schema is not None:
            key = encode(key_schema, kid, rec["key"])
            value = b"" if rec["value"] is None else encode(schema, sid, rec["value"])
            msg = key + KEY_DELIMITER + value
        else:
            msg = encode(schema, sid, rec)
            if args.mangle == "truncate":
                msg = msg[:-1]
            elif args.mangle == "extra":
                msg = msg + b"\x00"
        if DELIMITER in msg or KEY_DELIMITER in msg[len(KEY_DELIMITER):]:
            sys.exit("avro_encode.py: a record's encoding holds the delimiter")
        out.write(msg + DELIMITER)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
