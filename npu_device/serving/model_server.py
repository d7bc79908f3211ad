"""npu-model-server: tensorflow_model_server's flags, REST and gRPC APIs, for SavedModels (run
by TensorFlow with the NPU plugin) and .om serving containers (run by CannSession).

    npu-model-server --port 8500 --rest_api_port 8501 --model_name mlp \
        --model_base_path /models/mlp --enable_batching

Binds 127.0.0.1 only. Port 0 picks a free port; the chosen ports are printed in the line
`npu-model-server: ready grpc=HOST:PORT rest=HOST:PORT`. Requests are bounded in size
(--max_request_bytes, --max_request_elements, --rest_api_max_json_depth) and in concurrency
(--grpc_max_threads, --grpc_max_concurrent_rpcs, --rest_api_num_threads,
--rest_api_max_connections). SIGTERM/SIGINT drain: stop accepting, finish the requests in
flight, close keep-alive connections, exit within --drain_timeout_seconds (a second signal exits
at once).
"""
import argparse
import concurrent.futures
import logging
import os
import signal
import sys
import threading
import time

HOST = "127.0.0.1"
# On SIGTERM, calls a client already sent may still wait inside gRPC for the application to
# take them; gRPC's shutdown would cancel those. The drain keeps gRPC serving until no call has
# arrived for SETTLE_SECONDS (at most SETTLE_MAX_SECONDS), then shuts it down.
SETTLE_SECONDS, SETTLE_MAX_SECONDS = 0.5, 3.0
log = logging.getLogger("npu_device.serving")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="npu-model-server", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free port)")
    p.add_argument("--rest_api_port", type=int, default=-1,
                   help="REST port (0: any free port; default -1: no REST API)")
    p.add_argument("--model_name", default="default")
    p.add_argument("--model_base_path", default="",
                   help="folder of numbered version folders (SavedModel or one .om each)")
    p.add_argument("--model_config_file", default="",
                   help="text-format tensorflow.serving.ModelServerConfig (several models)")
    p.add_argument("--enable_batching", action="store_true")
    p.add_argument("--max_batch_size", type=int, default=32)
    p.add_argument("--batch_timeout_micros", type=int, default=1000)
    p.add_argument("--max_enqueued_batches", type=int, default=100)
    p.add_argument("--num_batch_threads", type=int, default=4)
    p.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                   help="seconds between checks for new versions (0: load once)")
    p.add_argument("--grpc_max_threads", type=int, default=64, help="gRPC worker threads")
    p.add_argument("--grpc_max_concurrent_rpcs", type=int, default=256,
                   help="gRPC calls handled or waiting for a thread; more get "
                        "RESOURCE_EXHAUSTED")
    p.add_argument("--rest_api_num_threads", type=int, default=32,
                   help="REST worker threads (requests handled at once)")
    p.add_argument("--rest_api_max_connections", type=int, default=256,
                   help="REST connections waiting for a thread (more get 503), and idle "
                        "keep-alive connections kept open (more are closed after a response)")
    p.add_argument("--rest_api_idle_timeout_seconds", type=float, default=30.0,
                   help="a REST connection silent this long is closed")
    p.add_argument("--rest_api_request_timeout_seconds", type=float, default=30.0,
                   help="a REST request (line, headers, body) must arrive within this long of "
                        "its first byte, or its connection is closed")
    p.add_argument("--max_request_bytes", type=int, default=64 << 20,
                   help="REST body / gRPC message bytes, and decoded input bytes, per request")
    p.add_argument("--max_request_elements", type=int, default=1 << 24,
                   help="elements of all input tensors of one request")
    p.add_argument("--rest_api_max_json_depth", type=int, default=64,
                   help="nesting of JSON arrays/objects in a REST body")
    p.add_argument("--drain_timeout_seconds", type=float, default=30.0,
                   help="on SIGTERM/SIGINT, how long in-flight requests may take to finish")
    a = p.parse_args(argv)
    if bool(a.model_base_path) == bool(a.model_config_file):
        p.error("give exactly one of --model_base_path or --model_config_file")
    for flag in ("max_batch_size", "max_enqueued_batches", "num_batch_threads",
                 "grpc_max_threads", "grpc_max_concurrent_rpcs", "rest_api_num_threads",
                 "rest_api_max_connections", "max_request_bytes", "max_request_elements",
                 "rest_api_max_json_depth"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    if a.max_request_bytes > 2**31 - 1:
        p.error(f"--max_request_bytes must be < 2 GiB (gRPC's limit), got {a.max_request_bytes}")
    for flag in ("batch_timeout_micros", "file_system_poll_wait_seconds", "drain_timeout_seconds"):
        if getattr(a, flag) < 0:
            p.error(f"--{flag} must be >= 0, got {getattr(a, flag)}")
    for flag in ("rest_api_idle_timeout_seconds", "rest_api_request_timeout_seconds"):
        if getattr(a, flag) <= 0:
            p.error(f"--{flag} must be > 0, got {getattr(a, flag)}")
    return a


def model_list(args):
    """[(name, base_path)] from the flags or the ModelServerConfig file."""
    if args.model_base_path:
        return [(args.model_name, args.model_base_path)]
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    config = model_server_config_pb2.ModelServerConfig()
    with open(args.model_config_file) as f:
        try:
            text_format.Parse(f.read(), config)
        except text_format.ParseError as e:
            raise ValueError(f"{args.model_config_file}: not a text ModelServerConfig: {e}") \
                from None
    models = [(c.name, c.base_path) for c in config.model_config_list.config]
    if not models:
        raise ValueError(f"{args.model_config_file} lists no models (model_config_list)")
    return models


class ModelServer:
    """The server in this process: start(), then stop() (drains in-flight requests)."""

    def __init__(self, args):
        from npu_device.serving.batching import BatchingParameters
        from npu_device.serving.limits import Limits
        from npu_device.serving.manager import ModelManager
        from npu_device.serving.metrics import Metrics
        self.args = args
        self.metrics = Metrics()
        self.limits = Limits(args.max_request_bytes, args.max_request_elements,
                             args.rest_api_max_json_depth)
        batching = BatchingParameters(args.max_batch_size, args.batch_timeout_micros,
                                      args.max_enqueued_batches, args.num_batch_threads) \
            if args.enable_batching else None
        self.manager = ModelManager(model_list(args), self.metrics, batching,
                                    args.file_system_poll_wait_seconds)
        self.grpc_port = self.rest_port = None
        self._rest = None

    def start(self):
        import grpc
        from npu_device.serving import grpc_service, rest
        a = self.args
        self.manager.start()
        self._grpc = grpc.server(
            concurrent.futures.ThreadPoolExecutor(a.grpc_max_threads, thread_name_prefix="grpc"),
            interceptors=[grpc_service.ArrivalInterceptor(self.metrics.in_flight)],
            maximum_concurrent_rpcs=a.grpc_max_concurrent_rpcs,
            options=[("grpc.max_receive_message_length", a.max_request_bytes)])
        grpc_service.add_services(self._grpc, self.manager, self.metrics, self.limits)
        self.grpc_port = self._grpc.add_insecure_port(f"{HOST}:{a.port}")
        if not self.grpc_port:
            raise OSError(f"cannot bind gRPC port {HOST}:{a.port}")
        self._grpc.start()
        if a.rest_api_port >= 0:
            self._rest = rest.RestServer(
                HOST, a.rest_api_port, self.manager, self.metrics, self.limits,
                a.rest_api_num_threads, a.rest_api_max_connections,
                a.rest_api_idle_timeout_seconds, a.rest_api_request_timeout_seconds)
            self.rest_port = self._rest.port
        return self

    def stop(self, timeout=None):
        """Drains: REST stops accepting at once (idle keep-alive connections are closed, the
        requests being handled finish and close theirs); gRPC serves until calls stop arriving
        (see SETTLE_SECONDS), then refuses new calls and lets running ones finish. At `timeout`
        seconds (default --drain_timeout_seconds) what is left is cancelled. Then the batchers
        and models stop. True if every request finished in time."""
        timeout = self.args.drain_timeout_seconds if timeout is None else timeout
        start = time.monotonic()
        end = start + timeout

        def left():
            return max(end - time.monotonic(), 0.0)
        rest = None
        if self._rest:
            rest = threading.Thread(target=self._rest.stop, args=(timeout,), daemon=True,
                                    name="rest-stop")
            rest.start()
        in_flight = self.metrics.in_flight
        settle_end = min(end, start + SETTLE_MAX_SECONDS)
        while (now := time.monotonic()) < settle_end:
            quiet = now - in_flight.last_arrival
            if quiet >= SETTLE_SECONDS:
                break
            time.sleep(min(SETTLE_SECONDS - quiet, settle_end - now))
        self._grpc.stop(left()).wait(left() + 1.0)
        if rest:
            rest.join(left() + 1.0)
        clean = in_flight.wait_idle(left()) and not (rest and rest.is_alive())
        cut = in_flight.count
        clean = self.manager.stop(left() + 1.0) and clean
        log.info("drained in %.1f s%s", time.monotonic() - start,
                 "" if clean else f"; the {timeout:g} s deadline cut {cut} request(s) short")
        return clean


def main(argv=None):
    args = parse_args(argv)
    # TensorFlow configures the root logger; the server's own messages get their own handler.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("npu-model-server: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        server = ModelServer(args).start()
    except (OSError, ValueError) as e:
        print(f"npu-model-server: error: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(*_):
        if stop.is_set():           # a second signal: no more waiting
            os.write(2, b"npu-model-server: second signal, exiting now\n")
            os._exit(1)
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    print(f"npu-model-server: ready grpc={HOST}:{server.grpc_port} "
          f"rest={HOST}:{server.rest_port}", flush=True)
    while not stop.wait(0.5):       # a timed wait lets the signal handler run promptly
        pass
    print("npu-model-server: shutting down (draining in-flight requests)", flush=True)
    if not server.stop():
        # threads still stuck in requests would hold up the interpreter's exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
