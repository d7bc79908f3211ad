"""npu-model-server: tensorflow_model_server's flags, REST and gRPC APIs, for SavedModels (run
by TensorFlow with the NPU plugin) and .om serving containers (run by CannSession).

    npu-model-server --port 8500 --rest_api_port 8501 --model_name mlp \
        --model_base_path /models/mlp --enable_batching

Binds 127.0.0.1 only. Port 0 picks a free port; the chosen ports are printed in the line
`npu-model-server: ready grpc=HOST:PORT rest=HOST:PORT`. SIGTERM/SIGINT stop accepting
requests, let in-flight ones finish, then exit.
"""
import argparse
import concurrent.futures
import http.server
import logging
import signal
import sys
import threading

HOST = "127.0.0.1"


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
    p.add_argument("--grpc_max_threads", type=int, default=64)
    a = p.parse_args(argv)
    if bool(a.model_base_path) == bool(a.model_config_file):
        p.error("give exactly one of --model_base_path or --model_config_file")
    for flag in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    if a.batch_timeout_micros < 0 or a.file_system_poll_wait_seconds < 0:
        p.error("--batch_timeout_micros and --file_system_poll_wait_seconds must be >= 0")
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


class _HttpServer(http.server.ThreadingHTTPServer):
    request_queue_size = 1024     # listen backlog: bursts of clients must not be reset
    daemon_threads = False        # server_close() joins in-flight requests


class ModelServer:
    """The server in this process: start(), then stop() (drains in-flight requests)."""

    def __init__(self, args):
        from npu_device.serving.batching import BatchingParameters
        from npu_device.serving.manager import ModelManager
        from npu_device.serving.metrics import Metrics
        self.args = args
        self.metrics = Metrics()
        batching = BatchingParameters(args.max_batch_size, args.batch_timeout_micros,
                                      args.max_enqueued_batches, args.num_batch_threads) \
            if args.enable_batching else None
        self.manager = ModelManager(model_list(args), self.metrics, batching,
                                    args.file_system_poll_wait_seconds)
        self.grpc_port = self.rest_port = None

    def start(self):
        import grpc
        from npu_device.serving import grpc_service, rest
        self.manager.start()
        self._grpc = grpc.server(concurrent.futures.ThreadPoolExecutor(
            self.args.grpc_max_threads, thread_name_prefix="grpc"))
        grpc_service.add_services(self._grpc, self.manager, self.metrics)
        self.grpc_port = self._grpc.add_insecure_port(f"{HOST}:{self.args.port}")
        if not self.grpc_port:
            raise OSError(f"cannot bind gRPC port {HOST}:{self.args.port}")
        self._grpc.start()
        self._http = None
        if self.args.rest_api_port >= 0:
            self._http = _HttpServer(
                (HOST, self.args.rest_api_port), rest.handler_class(self.manager, self.metrics))
            self.rest_port = self._http.server_address[1]
            self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)
            self._http_thread.start()
        return self

    def stop(self, grace=30):
        """Stops accepting requests, waits for the in-flight ones, unloads the models."""
        done = self._grpc.stop(grace)
        if self._http:
            self._http.shutdown()
            self._http.server_close()
        done.wait()
        self.manager.stop()


def main(argv=None):
    args = parse_args(argv)
    # TensorFlow configures the root logger; the server's own messages get their own handler.
    log = logging.getLogger("npu_device.serving")
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
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"npu-model-server: ready grpc={HOST}:{server.grpc_port} "
          f"rest={HOST}:{server.rest_port}", flush=True)
    while not stop.wait(0.5):       # a timed wait lets the signal handler run promptly
        pass
    print("npu-model-server: shutting down (draining in-flight requests)", flush=True)
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
