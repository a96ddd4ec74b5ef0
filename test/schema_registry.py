#!/usr/bin/python3
"""test/schema_registry.py: a schema registry for the tests and the demo.

It answers the part of Confluent's schema registry REST API that the
extension uses (SPEC 2.1.1), as Confluent's does:

  POST /subjects/{subject}/versions      {"schema": "..."} -> {"id": N}
  GET  /schemas/ids/{id}                 -> {"schema": "..."}
  GET  /subjects/{subject}/versions/latest
                                         -> {"subject", "version", "id", "schema"}
  GET  /subjects, GET /subjects/{subject}/versions   (lists, for people)

A schema registered again (under any subject) keeps its id; a new one gets
the next id; errors are {"error_code": ..., "message": ...} with Confluent's
codes (40401 subject not found, 40403 schema not found, 42201 invalid
schema).  No compatibility rules are checked.

Usage: schema_registry.py [--port N] [--state FILE] [--basic-auth USER:SECRET]
                          [--url-file FILE] [--log FILE]

It prints its URL (http://127.0.0.1:PORT) on the first line of stdout, and
to --url-file, once it listens.  --port 0 (the default) takes a free port;
--state keeps the schemas in FILE (written after each registration, read at
start), so that a registry stopped and started again on the same port is
the same registry; --basic-auth makes every request need that user and
secret (HTTP basic authentication, 401 otherwise).  SIGTERM stops it.
Only the Python standard library is used.
"""
import argparse
import base64
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class Registry:
    """Schemas by id, subjects' versions; persisted to a file when given one."""

    def __init__(self, state):
        self.state = state
        self.lock = threading.Lock()
        self.schemas = {}       # id -> schema text
        self.subjects = {}      # subject -> [id, ...] (versions in order)
        if state and os.path.exists(state):
            with open(state) as f:
                saved = json.load(f)
            self.schemas = {int(k): v for k, v in saved["schemas"].items()}
            self.subjects = saved["subjects"]

    def save(self):
        if not self.state:
            return
        tmp = self.state + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"schemas": self.schemas, "subjects": self.subjects}, f)
        os.replace(tmp, self.state)

    @staticmethod
    def canonical(text):
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))

    def register(self, subject, text):
        canon = self.canonical(text)
        with self.lock:
            found = [i for i, s in self.schemas.items() if self.canonical(s) == canon]
            if found:
                sid = found[0]
            else:
                sid = max(self.schemas, default=0) + 1
                self.schemas[sid] = text
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            self.save()
            return sid


class Handler(BaseHTTPRequestHandler):
    registry = None
    auth = None
    log = None
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if self.log:
            self.log.write("%s %s\n" % (self.address_string(), fmt % args))
            self.log.flush()

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message):
        self.reply(status, {"error_code": code, "message": message})

    def authorized(self):
        if self.auth is None:
            return True
        given = self.headers.get("Authorization", "")
        if given.startswith("Basic ") and base64.b64decode(given[6:]).decode() == self.auth:
            return True
        self.error(401, 401, "Unauthorized")
        return False

    def parts(self):
        return [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]

    def do_GET(self):
        if not self.authorized():
            return
        p = self.parts()
        reg = self.registry
        if len(p) == 3 and p[0] == "schemas" and p[1] == "ids" and p[2].isdigit():
            sid = int(p[2])
            if sid in reg.schemas:
                return self.reply(200, {"schema": reg.schemas[sid]})
            return self.error(404, 40403, "Schema %d not found" % sid)
        if p == ["subjects"]:
            return self.reply(200, sorted(reg.subjects))
        if len(p) >= 3 and p[0] == "subjects" and p[2] == "versions":
            versions = reg.subjects.get(p[1])
            if versions is None:
                return self.error(404, 40401, "Subject '%s' not found." % p[1])
            if len(p) == 3:
                return self.reply(200, list(range(1, len(versions) + 1)))
            if len(p) == 4 and (p[3] == "latest" or p[3].isdigit()):
                v = len(versions) if p[3] == "latest" else int(p[3])
                if not 1 <= v <= len(versions):
                    return self.error(404, 40402, "Version %s not found." % p[3])
                sid = versions[v - 1]
                return self.reply(200, {"subject": p[1], "version": v, "id": sid,
                                        "schema": reg.schemas[sid]})
        return self.error(404, 404, "HTTP 404 Not Found")

    def do_POST(self):
        if not self.authorized():
            return
        p = self.parts()
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if len(p) == 3 and p[0] == "subjects" and p[2] == "versions":
            try:
                req = json.loads(body)
                text = req["schema"]
                if req.get("schemaType", "AVRO") != "AVRO":
                    raise ValueError("only Avro schemas")
                json.loads(text)
            except (ValueError, KeyError, TypeError) as e:
                return self.error(422, 42201, "Invalid schema: %s" % e)
            return self.reply(200, {"id": self.registry.register(p[1], text)})
        return self.error(404, 404, "HTTP 404 Not Found")


def main():
    ap = argparse.ArgumentParser(description="a schema registry for tests")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--state")
    ap.add_argument("--basic-auth")
    ap.add_argument("--url-file")
    ap.add_argument("--log")
    args = ap.parse_args()

    Handler.registry = Registry(args.state)
    Handler.auth = args.basic_auth
    Handler.log = open(args.log, "a") if args.log else None
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    url = "http://127.0.0.1:%d" % server.server_address[1]
    if args.url_file:
        with open(args.url_file + ".tmp", "w") as f:
            f.write(url + "\n")
        os.replace(args.url_file + ".tmp", args.url_file)
    print(url, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
