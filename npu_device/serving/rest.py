"""REST API v1 of tensorflow_model_server: a WSGI application served by cheroot (a
well-kept, pure-Python HTTP/1.1 server: bounded worker threads, bounded queue of waiting
connections, keep-alive with idle expiry, request body/header size limits, graceful stop).

    GET  /v1/models/<name>[/versions/N]            status
    GET  /v1/models/<name>[/versions/N]/metadata   signatures
    POST /v1/models/<name>[/versions/N]:predict    {"instances": [...]} or {"inputs": ...}
    GET  /monitoring/prometheus/metrics

Errors are {"error": message} with 400 (malformed), 404 (unknown model/version), 413 (over a
size limit; the message names the flag), 503 (batch queue or connection limit full), 500.
"""
import base64
import http
import json
import logging
import queue
import re
import socket
import threading
import time

import numpy as np

from npu_device.serving.errors import (InvalidArgument, NotFound, ResourceExhausted,
                                       ServingError)
from npu_device.serving.limits import Budget, array_from_json, check_json_depth, dtype_enum

_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?(/metadata|:predict)?$")
MAX_HEADER_BYTES = 64 << 10           # request line + headers
log = logging.getLogger("npu_device.serving")


class RestServer:
    """The REST API on HOST:port (0: any free port) in a thread of its own; stop(timeout)
    stops accepting, closes idle keep-alive connections, lets requests being handled finish
    (their responses say Connection: close) and force-closes what is left after `timeout`."""

    def __init__(self, host, port, manager, metrics, limits, num_threads=32,
                 max_connections=256, idle_timeout=30.0, request_timeout=30.0):
        from cheroot import errors as cheroot_errors
        from cheroot import server as cheroot_server
        from cheroot import wsgi
        deadlines = self._deadlines = _ArrivalDeadlines(request_timeout)

        class Request(cheroot_server.HTTPRequest):
            def simple_response(self, status, msg=""):
                # cheroot's own answers (before the application runs) in the API's format,
                # naming the limit
                code = int(str(status)[:3])
                if code == 413 and "entity" in msg:
                    msg = _error_json(f"request body is over the limit of "
                                      f"{limits.max_request_bytes} bytes (--max_request_bytes)")
                elif code == 413:
                    msg = _error_json(f"request headers are over the limit of "
                                      f"{MAX_HEADER_BYTES} bytes")
                elif code == 503 and not msg:
                    msg = _error_json(f"the server has {max_connections} connections waiting "
                                      f"for a thread (--rest_api_max_connections); retry later")
                elif code >= 400 and not msg.startswith("{"):
                    msg = _error_json(msg or http.HTTPStatus(code).phrase)
                if code < 400:
                    return super().simple_response(status, msg)
                # written here rather than by cheroot, whose answer says text/plain
                close = code in (413, 414)
                if close:
                    self.close_connection = True
                    if self.response_protocol != "HTTP/1.1":
                        status = "400 Bad Request"     # HTTP/1.0 has neither 413 nor 414
                body = msg.encode()
                head = (f"{self.server.protocol} {status}\r\nContent-Length: {len(body)}\r\n"
                        "Content-Type: application/json\r\n"
                        + ("Connection: close\r\n" if close else "") + "\r\n")
                try:
                    self.conn.wfile.write(head.encode("iso-8859-1") + body)
                except OSError as e:
                    if e.args and e.args[0] not in cheroot_errors.socket_errors_to_ignore:
                        raise

            def read_request_headers(self):
                self.inheaders = _FramingHeaders()
                return super().read_request_headers()

        class Connection(cheroot_server.HTTPConnection):
            RequestHandlerClass = Request

            def communicate(self):
                # a worker takes the connection once its next request's first byte is here
                deadlines.start(self)
                _arrival.done = lambda: deadlines.end(self)
                try:
                    return super().communicate()
                finally:
                    _arrival.done = None
                    deadlines.end(self)

        class Server(wsgi.Server):
            ConnectionClass = Connection

            def process_conn(self, conn):
                # all threads busy and --rest_api_max_connections waiting: 503 at once (a
                # small write on a fresh connection, it cannot block)
                try:
                    self.requests.put(conn)
                except queue.Full:
                    try:
                        Request(self, conn).simple_response("503 Service Unavailable")
                    except OSError:
                        pass
                    conn.linger = True      # as cheroot: let the client read before the FIN
                    conn.close()

            def error_log(self, msg="", level=20, traceback=False):
                # client disconnects and timeouts are routine; errors are logged
                log.log(level if level >= logging.ERROR else logging.DEBUG, "REST: %s", msg,
                        exc_info=traceback)

        self.server = Server(
            (host, port), make_app(manager, metrics, limits), numthreads=num_threads,
            max=num_threads, request_queue_size=1024, timeout=idle_timeout,
            accepted_queue_size=max_connections, accepted_queue_timeout=0)
        self.server.max_request_body_size = limits.max_request_bytes
        self.server.max_request_header_size = MAX_HEADER_BYTES
        self.server.keep_alive_conn_limit = max_connections
        self.server.prepare()                       # binds; OSError if it cannot
        self.port = self.server.bind_addr[1]
        self._thread = threading.Thread(target=self.server.serve, daemon=True, name="rest")
        self._thread.start()

    def stop(self, timeout):
        self.server.shutdown_timeout = max(timeout, 0.1)
        self.server.stop()
        self._thread.join(max(timeout, 0.1))
        self._deadlines.stop()


class _FramingHeaders(dict):
    """A request's headers, refusing (ValueError: cheroot answers 400) a second Content-Length
    that differs from the first: cheroot would keep the last, a proxy in front may have used
    the first, and the two would disagree on where the request ends (request smuggling)."""

    def __setitem__(self, key, value):
        if key == b"Content-Length" and self.get(key, value) != value:
            raise ValueError("conflicting Content-Length headers")
        super().__setitem__(key, value)


# The connection whose request this worker thread is reading: `done()` says it has arrived.
_arrival = threading.local()


def _request_arrived():
    done = getattr(_arrival, "done", None)
    if done is not None:
        done()


class _ArrivalDeadlines:
    """Shuts the socket of a connection whose request (line, headers, body) has not all arrived
    `seconds` after its first byte. cheroot gives a worker thread the connection at that byte
    and the thread blocks reading the rest: a client sending a byte now and then (slowloris), or
    less body than its Content-Length, would otherwise hold the thread as long as it likes, each
    read well within the idle timeout."""

    def __init__(self, seconds):
        self.seconds = seconds
        self._lock = threading.Lock()
        self._due = {}                 # connection -> time.monotonic() deadline
        self._stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="rest-deadlines").start()

    def start(self, conn):
        with self._lock:
            self._due[conn] = time.monotonic() + self.seconds

    def end(self, conn):
        with self._lock:
            self._due.pop(conn, None)

    def stop(self):
        self._stopped.set()

    def _watch(self):
        while not self._stopped.wait(min(0.25, self.seconds / 4)):
            now = time.monotonic()
            with self._lock:
                late = [c for c, due in self._due.items() if due <= now]
                for c in late:
                    del self._due[c]
            for c in late:
                log.info("REST: closing a connection whose request did not arrive within %g s "
                         "(--rest_api_request_timeout_seconds)", self.seconds)
                try:
                    c.socket.shutdown(socket.SHUT_RDWR)    # the blocked read returns
                except OSError:
                    pass


def _error_json(message):
    return json.dumps({"error": message})


def make_app(manager, metrics, limits):
    """The WSGI application."""

    def app(environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO") or "/"
        if path == "/monitoring/prometheus/metrics" and method == "GET":
            return _respond(start_response, 200, metrics.render().encode(),
                            "text/plain; version=0.0.4")
        start, api, model = time.monotonic(), "unknown", ""
        metrics.in_flight.enter()
        try:
            if method != "POST":
                _request_arrived()
            m = _PATH.match(path)
            if not m:
                raise NotFound(f"no such endpoint: {method} {path}")
            model, version, action = m.group(1), m.group(2), m.group(3)
            version = int(version) if version else None
            if action == ":predict" and method == "POST":
                api = "predict"
                data = _read_body(environ, limits.max_request_bytes)
                _request_arrived()
                body = _parse(data, limits.max_json_depth)
                s, out = _predict(manager, model, version, body, limits, data)
                result = _encode_outputs(out, "instances" in body)
            elif action == "/metadata" and method == "GET":
                api = "metadata"
                result = _metadata(manager, model, version)
            elif action is None and method == "GET":
                api = "status"
                result = _status(manager, model, version)
            else:
                raise InvalidArgument(f"{method} is not allowed on {path}")
            status, code = 200, "OK"
        except ServingError as e:
            status, code, result = e.http_status, e.grpc_code, {"error": str(e)}
        except Exception as e:          # a bug must answer 500, not drop the connection
            status, code, result = 500, "INTERNAL", {"error": f"{type(e).__name__}: {e}"}
        finally:
            metrics.in_flight.exit()
        metrics.request(model, api, code, time.monotonic() - start)
        return _respond(start_response, status,
                        json.dumps(result, default=_jsonable).encode(), "application/json")

    return app


def _respond(start_response, status, data, content_type):
    start_response(f"{status} {http.HTTPStatus(status).phrase}",
                   [("Content-Type", content_type), ("Content-Length", str(len(data)))])
    return [data]


def _read_body(environ, limit):
    """The request body, refused (413) beyond `limit` bytes before it is read."""
    from cheroot.errors import MaxSizeExceeded
    length, stream = environ.get("CONTENT_LENGTH") or "", environ["wsgi.input"]
    too_big = ResourceExhausted(f"request body is over the limit of {limit} bytes "
                                f"(--max_request_bytes)")
    if length:
        try:
            n = int(length)
        except ValueError:
            raise InvalidArgument(f"Content-Length is not a number: {length!r}") from None
        if n < 0:
            raise InvalidArgument(f"Content-Length is negative: {n}")
        if n > limit:
            raise ResourceExhausted(f"request body is {n} bytes, over the limit of {limit} "
                                    f"bytes (--max_request_bytes)")
        return stream.read(n)
    try:                             # chunked (or none): at most one byte past the limit
        data = stream.read(limit + 1)
    except MaxSizeExceeded:
        raise too_big from None
    except ValueError as e:          # a bad chunk size line
        raise InvalidArgument(f"bad chunked request body: {e}") from None
    except OSError as e:             # cheroot refuses a chunk over the limit before reading it
        if "Too Large" not in str(e):
            raise
        raise too_big from None
    if len(data) > limit:
        raise too_big
    return data


def _parse(data, max_depth):
    check_json_depth(data, max_depth)
    try:
        body = json.loads(data or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise InvalidArgument(f"request body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidArgument('request body must be a JSON object with "instances" '
                              'or "inputs"')
    return body


def _predict(manager, model, version, body, limits, data):
    s, _ = manager.servable(model, version)
    if not isinstance(body.get("signature_name", ""), str):
        raise InvalidArgument('"signature_name" must be a string')
    sig = s.signature(body.get("signature_name"))
    if ("instances" in body) == ("inputs" in body):
        raise InvalidArgument('request must have exactly one of "instances" (row format) or '
                              '"inputs" (columnar format)')
    names = [i.name for i in sig.inputs]
    if "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows:
            raise InvalidArgument('"instances" must be a non-empty list')
        if all(isinstance(r, dict) for r in rows) and not all(_b64_value(r, names) for r in rows):
            columns = {k: [r.get(k) for r in rows] for k in rows[0]}
            if any(set(r) != set(rows[0]) for r in rows):
                raise InvalidArgument("every instance must name the same inputs")
        elif len(names) == 1:
            columns = {names[0]: rows}
        else:
            raise InvalidArgument(f"signature {sig.name!r} has inputs {names}: each instance "
                                  f"must be an object naming them")
    else:
        inputs = body["inputs"]
        columns = inputs if isinstance(inputs, dict) and not _b64_value(inputs, names) \
            else {names[0]: inputs} if len(names) == 1 else None
        if columns is None:
            raise InvalidArgument(f'signature {sig.name!r} has inputs {names}: "inputs" must '
                                  f'be an object naming them')
    specs, budget, feeds = {i.name: i for i in sig.inputs}, Budget(limits), {}
    # the raw body tells whether the slower checks can be skipped
    has_b64, literals = b'"b64"' in data, any(w in data for w in (b"null", b"true", b"false"))
    for k, v in columns.items():
        if k not in specs:
            raise InvalidArgument(f"unknown input {k!r}; signature {sig.name!r} takes {names}")
        feeds[k] = array_from_json(k, _decode_b64(v) if has_b64 else v, specs[k], sig.name,
                                   budget, literals)
    return manager.predict(model, version, sig.name, feeds)


def _b64_value(v, names):
    """Whether object `v` is a {"b64": ...} value, not inputs by name: TF Serving takes
    {"instances": [{"b64": "..."}]} as the rows of a single (bytes) input, as images are sent."""
    return set(v) == {"b64"} and "b64" not in names


def _decode_b64(v):
    if isinstance(v, dict):
        if set(v) != {"b64"}:
            raise InvalidArgument(f'an object value must be {{"b64": "..."}}, got keys '
                                  f"{sorted(v)}")
        try:
            return base64.b64decode(v["b64"], validate=True)
        except (ValueError, TypeError) as e:
            raise InvalidArgument(f"bad base64 value: {e}") from None
    if isinstance(v, list):
        return [_decode_b64(x) for x in v]
    return v


def _encode_outputs(out, rows):
    if rows:          # one prediction per row
        n = len(next(iter(out.values())))
        if len(out) == 1:
            return {"predictions": next(iter(out.values()))}
        return {"predictions": [{k: v[i] for k, v in out.items()} for i in range(n)]}
    return {"outputs": next(iter(out.values())) if len(out) == 1 else out}


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return [_jsonable(v) for v in x] if x.dtype == object else x.tolist()
    if isinstance(x, bytes):
        try:
            return x.decode()
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(x).decode()}
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def _status(manager, model, version):
    states = manager.status(model)
    if version is not None:
        if version not in states:
            raise NotFound(f"model {model!r} version {version} is not known")
        states = {version: states[version]}
    return {"model_version_status": [
        {"version": str(v), "state": st, "status": {"error_code": "OK" if not err else "UNKNOWN",
                                                    "error_message": err}}
        for v, (st, err) in sorted(states.items(), reverse=True)]}


def _metadata(manager, model, version):
    s, _ = manager.servable(model, version)

    def info(t):
        return {"dtype": _dtype_name(t.dtype), "tensor_shape": {
            "dim": [{"size": str(d), "name": ""} for d in t.shape] if t.shape is not None
            else [], "unknown_rank": t.shape is None}, "name": t.name}
    return {"model_spec": {"name": model, "signature_name": "", "version": str(s.version)},
            "metadata": {"signature_def": {"signature_def": {
                name: {"inputs": {i.name: info(i) for i in sig.inputs},
                       "outputs": {o.name: info(o) for o in sig.outputs},
                       "method_name": "tensorflow/serving/predict"}
                for name, sig in s.signatures.items()}}}}


def _dtype_name(dtype):
    from tensorflow.core.framework import types_pb2
    return types_pb2.DataType.Name(dtype_enum(dtype))
