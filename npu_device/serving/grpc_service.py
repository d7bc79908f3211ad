"""gRPC API of tensorflow_model_server (protos from tensorflow-serving-api):
PredictionService.Predict / GetModelMetadata and ModelService.GetModelStatus.

Request tensors are decoded by limits.tensor_from_proto: dtypes must be the signature's, and
declared shapes are checked against --max_request_elements / --max_request_bytes before
anything is allocated."""
import time

import grpc
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)
from tensorflow.core.protobuf import meta_graph_pb2

from npu_device.serving.errors import InvalidArgument, NotFound, ServingError
from npu_device.serving.limits import Budget, dtype_enum, tensor_from_proto


def _version(spec):
    return spec.version.value if spec.HasField("version") else None


class _Base:
    def __init__(self, manager, metrics, limits):
        self.manager, self.metrics, self.limits = manager, metrics, limits

    def _call(self, api, model, context, fn):
        start = time.monotonic()
        self.metrics.in_flight.enter()
        try:
            result = fn()
        except ServingError as e:
            self.metrics.request(model, api, e.grpc_code, time.monotonic() - start)
            context.abort(getattr(grpc.StatusCode, e.grpc_code), str(e))
        except Exception as e:      # a bug answers INTERNAL, it must not kill the server
            self.metrics.request(model, api, "INTERNAL", time.monotonic() - start)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
        finally:
            self.metrics.in_flight.exit()
        self.metrics.request(model, api, "OK", time.monotonic() - start)
        return result


class PredictionService(_Base, prediction_service_pb2_grpc.PredictionServiceServicer):
    def Predict(self, request, context):
        return self._call("predict", request.model_spec.name, context,
                          lambda: self._predict(request))

    def _predict(self, request):
        import tensorflow as tf
        spec = request.model_spec
        # Decoded against the signature: dtypes must match, and declared shapes are checked
        # against the limits before anything is allocated.
        s, _ = self.manager.servable(spec.name, _version(spec))
        sig = s.signature(spec.signature_name)
        specs, budget, feeds = {i.name: i for i in sig.inputs}, Budget(self.limits), {}
        for name, proto in request.inputs.items():
            if name not in specs:
                raise InvalidArgument(f"unknown input {name!r}; signature {sig.name!r} takes "
                                      f"{sorted(specs)}")
            feeds[name] = tensor_from_proto(name, proto, specs[name], sig.name, budget)
        s, out = self.manager.predict(spec.name, _version(spec), sig.name, feeds)
        wanted = list(request.output_filter) or list(out)
        unknown = [k for k in wanted if k not in out]
        if unknown:
            raise InvalidArgument(f"output_filter names {unknown}; outputs: {sorted(out)}")
        reply = predict_pb2.PredictResponse()
        reply.model_spec.name = spec.name
        reply.model_spec.version.value = s.version
        reply.model_spec.signature_name = spec.signature_name or "serving_default"
        for k in wanted:
            reply.outputs[k].CopyFrom(tf.make_tensor_proto(out[k]))
        return reply

    def GetModelMetadata(self, request, context):
        return self._call("metadata", request.model_spec.name, context,
                          lambda: self._metadata(request))

    def _metadata(self, request):
        if list(request.metadata_field) != ["signature_def"]:
            raise InvalidArgument(f"metadata_field must be ['signature_def'], got "
                                  f"{list(request.metadata_field)}")
        s, _ = self.manager.servable(request.model_spec.name, _version(request.model_spec))
        sig_map = get_model_metadata_pb2.SignatureDefMap()
        for name, sig in s.signatures.items():
            d = sig_map.signature_def[name]
            d.method_name = "tensorflow/serving/predict"
            for target, specs in ((d.inputs, sig.inputs), (d.outputs, sig.outputs)):
                for t in specs:
                    _tensor_info(target[t.name], t)
        reply = get_model_metadata_pb2.GetModelMetadataResponse()
        reply.model_spec.name = request.model_spec.name
        reply.model_spec.version.value = s.version
        reply.metadata["signature_def"].Pack(sig_map)
        return reply


def _tensor_info(info: meta_graph_pb2.TensorInfo, spec):
    info.name = spec.name
    info.dtype = dtype_enum(spec.dtype)
    if spec.shape is None:
        info.tensor_shape.unknown_rank = True
    else:
        for d in spec.shape:
            info.tensor_shape.dim.add(size=d)


class ModelService(_Base, model_service_pb2_grpc.ModelServiceServicer):
    def GetModelStatus(self, request, context):
        return self._call("status", request.model_spec.name, context,
                          lambda: self._status(request))

    def _status(self, request):
        states = self.manager.status(request.model_spec.name)
        version = _version(request.model_spec)
        if version is not None:
            states = {v: s for v, s in states.items() if v == version}
            if not states:
                raise NotFound(f"model {request.model_spec.name!r} version {version} is not "
                               f"known")
        reply = get_model_status_pb2.GetModelStatusResponse()
        for v, (state, err) in sorted(states.items(), reverse=True):
            st = reply.model_version_status.add(version=v)
            st.state = get_model_status_pb2.ModelVersionStatus.State.Value(state)
            st.status.error_code = 2 if err else 0       # tensorflow.error.Code: UNKNOWN / OK
            st.status.error_message = err
        return reply


class ArrivalInterceptor(grpc.ServerInterceptor):
    """Notes when each call is handed to the application (the server's drain waits until calls
    stop arriving before it shuts gRPC down: a call still queued inside gRPC at shutdown would
    be cancelled)."""

    def __init__(self, in_flight):
        self.in_flight = in_flight

    def intercept_service(self, continuation, handler_call_details):
        self.in_flight.arrived()
        return continuation(handler_call_details)


def add_services(server, manager, metrics, limits):
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(manager, metrics, limits), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(
        ModelService(manager, metrics, limits), server)
