"""REST API v1 of tensorflow_model_server on http.server:

    GET  /v1/models/<name>[/versions/N]            status
    GET  /v1/models/<name>[/versions/N]/metadata   signatures
    POST /v1/models/<name>[/versions/N]:predict    {"instances": [...]} or {"inputs": ...}
    GET  /monitoring/prometheus/metrics

Errors are {"error": message} with 400 (malformed), 404 (unknown model/version), 503, 500.
"""
import base64
import http.server
import json
import re
import time

import numpy as np

from npu_device.serving.errors import InvalidArgument, NotFound, ServingError
from npu_device.serving.servable import dtype_enum

_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?(/metadata|:predict)?$")


def handler_class(manager, metrics):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5      # idle keep-alive connections close, so shutdown's join never hangs

        def log_message(self, *args):      # requests are counted in metrics, not logged
            pass

        def do_GET(self):
            if self.path == "/monitoring/prometheus/metrics":
                return self._send(200, metrics.render().encode(), "text/plain; version=0.0.4")
            self._dispatch("GET")

        def do_POST(self):
            self._dispatch("POST")

        def _dispatch(self, method):
            start, api, model = time.monotonic(), "unknown", ""
            try:
                m = _PATH.match(self.path.split("?")[0])
                if not m:
                    raise NotFound(f"no such endpoint: {method} {self.path}")
                model, version, action = m.group(1), m.group(2), m.group(3)
                version = int(version) if version else None
                if action == ":predict" and method == "POST":
                    api = "predict"
                    body = self._body()
                    s, out = _predict(manager, model, version, body)
                    result = _encode_outputs(out, "instances" in body)
                elif action == "/metadata" and method == "GET":
                    api = "metadata"
                    result = _metadata(manager, model, version)
                elif action is None and method == "GET":
                    api = "status"
                    result = _status(manager, model, version)
                else:
                    raise InvalidArgument(f"{method} is not allowed on {self.path}")
                self._json(200, result)
                metrics.request(model, api, "OK", time.monotonic() - start)
            except ServingError as e:
                self._json(e.http_status, {"error": str(e)})
                metrics.request(model, api, e.grpc_code, time.monotonic() - start)
            except Exception as e:          # a bug must answer 500, not drop the connection
                self._json(500, {"error": f"{type(e).__name__}: {e}"})
                metrics.request(model, api, "INTERNAL", time.monotonic() - start)

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except (ValueError, UnicodeDecodeError) as e:
                raise InvalidArgument(f"request body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise InvalidArgument('request body must be a JSON object with "instances" '
                                      'or "inputs"')
            return body

        def _json(self, status, obj):
            self._send(status, json.dumps(obj, default=_jsonable).encode(), "application/json")

        def _send(self, status, data, content_type):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _predict(manager, model, version, body):
    s, _ = manager.servable(model, version)
    sig = s.signature(body.get("signature_name"))
    if ("instances" in body) == ("inputs" in body):
        raise InvalidArgument('request must have exactly one of "instances" (row format) or '
                              '"inputs" (columnar format)')
    names = [i.name for i in sig.inputs]
    if "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows:
            raise InvalidArgument('"instances" must be a non-empty list')
        if all(isinstance(r, dict) for r in rows):
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
        columns = inputs if isinstance(inputs, dict) else {names[0]: inputs} \
            if len(names) == 1 else None
        if columns is None:
            raise InvalidArgument(f'signature {sig.name!r} has inputs {names}: "inputs" must '
                                  f'be an object naming them')
    specs = {i.name: i for i in sig.inputs}
    feeds = {}
    for k, v in columns.items():
        if k not in specs:
            raise InvalidArgument(f"unknown input {k!r}; signature {sig.name!r} takes {names}")
        feeds[k] = _to_array(k, _decode_b64(v), specs[k].dtype)
    return manager.predict(model, version, sig.name, feeds)


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


def _to_array(name, value, dtype):
    try:
        a = np.array(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"input {name!r} cannot be read as {np.dtype(dtype)}: {e}") \
            from None
    if a.dtype == object and a.size and not all(isinstance(x, (bytes, str)) for x in a.flat):
        raise InvalidArgument(f"input {name!r} must be a (nested) list of equal-length rows")
    return a


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
