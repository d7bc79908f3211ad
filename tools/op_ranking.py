"""Which TF ops real programs run, and which of them would leave the NPU: the measured list that
decides which kernels to add next (docs/op_ranking.md).

    python -m tools.op_ranking                       # every workload; writes docs/op_ranking.md
    python -m tools.op_ranking --only layers --out -  # one group, to stdout

Each workload is traced, not run: a tf.function computing a forward pass and, where the program
would train, the gradient (tf.GradientTape) or the optimizer step. The op types of its graph,
function bodies included (control flow, Keras' RNN loops), are looked up in TensorFlow's kernel
registry. An op "runs on the NPU" when it has an NPU kernel (the graph engine's or the
plugin's) or a device-default kernel (variables, Identity ... that TF registers for every
device); "host by nature" when TF keeps it on the host on every accelerator (strings, tf.data,
lookup tables, summaries: no device kernel anywhere, GPU included); anything else falls back to
the CPU. Groups:

* layers: the Keras layer zoo (keras.layers), forward + gradient (training=True);
* applications: keras.applications models (weights=None, small inputs), forward + gradient;
* nlp: keras_hub-style blocks built from Keras layers (transformer encoder/decoder, position
  and token embeddings, TextVectorization), forward + gradient;
* apis: tf.image, tf.signal, tf.linalg, tf.math and tf.nn functions, forward + gradient where
  differentiable;
* compat_v1: TF1-style training: every tf.compat.v1.train optimizer minimizing a loss, dense and
  sparse (embedding) gradients.
"""
import argparse
import collections
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import kernels as tf_kernels

import npu_device  # noqa: F401  (the NPU plugin's kernels must be registered to be looked up)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Ops no accelerator runs: TF registers no GPU kernel for them either (strings, datasets, lookup
# tables, summaries, host-side control). Checked against the GPU registrations where TF ships
# them; listed so the ranking separates "not NPU work" from "missing on the NPU".
_HOST_PREFIXES = ("String", "Regex", "Unicode", "Dataset", "Iterator", "Lookup", "HashTable",
                  "MutableHashTable", "Summary", "Write", "Print", "Save", "Restore", "Sharded")
_HOST_OPS = {"AsString", "DecodeBase64", "EncodeBase64", "ReduceJoin", "Substr", "StaticRegexFullMatch",
             "StaticRegexReplace", "InitializeTableFromTextFileV2", "LookupTableFindV2",
             "LookupTableImportV2", "LookupTableSizeV2", "LookupTableExportV2", "LookupTableInsertV2",
             "LookupTableRemoveV2", "AnonymousHashTable", "AnonymousMutableHashTable",
             "StringToHashBucketFast", "StringToHashBucketStrong", "StringSplitV2", "StringLower",
             "StringStrip", "StringJoin", "ParseExampleV2", "DecodeRaw", "DecodeJpeg", "DecodePng",
             "DecodeImage", "EncodeJpeg", "EncodePng", "ReadFile", "WriteFile", "MatchingFiles"}


def npu_status(op):
    """'npu', 'host' (no accelerator runs it) or 'cpu' (falls back)."""
    devices = {k.device_type for k in tf_kernels.get_registered_kernels_for_op(op).kernel}
    if devices & {"NPU", "DEFAULT"}:
        return "npu"
    if op in _HOST_OPS or op.startswith(_HOST_PREFIXES):
        return "host"
    return "cpu"


def graph_ops(concrete):
    """Op types of a concrete function's graph and of every function body it calls."""
    found = collections.Counter(op.type for op in concrete.graph.get_operations())
    fdef_lib = concrete.graph.as_graph_def().library
    for fdef in fdef_lib.function:
        found.update(node.op for node in fdef.node_def)
    return found


def _trace(fn, *specs):
    return graph_ops(tf.function(fn).get_concrete_function(*specs))


def _with_gradient(fn, weights, *specs):
    """The trace of fn and of the gradient of the sum of its float outputs for `weights()` and
    its float inputs; of fn alone where TF defines no gradient (ResizeArea ...)."""
    def step(*xs):
        with tf.GradientTape() as tape:
            for x in xs:
                if x.dtype.is_floating:
                    tape.watch(x)
            outs = tf.nest.flatten(fn(*xs))
            floats = [tf.reduce_sum(tf.math.real(o)) if o.dtype.is_complex else tf.reduce_sum(o)
                      for o in outs if o.dtype.is_floating or o.dtype.is_complex]
        if not floats:
            return outs
        loss = tf.add_n(floats)
        watched = list(weights()) + [x for x in xs if x.dtype.is_floating]
        return outs, tape.gradient(loss, watched, unconnected_gradients="zero")
    try:
        return _trace(step, *specs)
    except Exception as e:                                          # noqa: BLE001
        if "gradient registry has no entry" not in str(e):          # an op without a gradient
            raise
        return _trace(fn, *specs)


def _train_trace(model_or_layer, inputs, as_list=False):
    """Forward (training=True) and the gradient of the outputs' sum for the trainable weights
    and float inputs. as_list: the layer takes its inputs as one list (merge layers)."""
    call = (lambda *xs: model_or_layer(list(xs), training=True)) if as_list else \
        (lambda *xs: model_or_layer(*xs, training=True))
    call(*inputs)                                     # builds the weights outside the trace
    return _with_gradient(call, lambda: model_or_layer.trainable_weights,
                          *[tf.TensorSpec(x.shape, x.dtype) for x in inputs])


def _f(*shape):
    return tf.constant(np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32))


def _ints(hi, *shape):
    return tf.constant(np.random.default_rng(0).integers(0, hi, shape).astype(np.int32))


def layer_workloads():
    import keras
    from keras import layers as L
    img, seq, vol = _f(2, 16, 16, 3), _f(2, 10, 8), _f(2, 6, 6, 6, 2)
    cases = {
        "Dense": (L.Dense(4), [_f(2, 8)]),
        "EinsumDense": (L.EinsumDense("ab,bc->ac", output_shape=4), [_f(2, 8)]),
        "Conv1D": (L.Conv1D(4, 3), [seq]),
        "Conv2D": (L.Conv2D(4, 3, padding="same"), [img]),
        "Conv2D dilated": (L.Conv2D(4, 3, dilation_rate=2), [img]),
        "Conv3D": (L.Conv3D(2, 3), [vol]),
        "Conv1DTranspose": (L.Conv1DTranspose(4, 3, strides=2), [seq]),
        "Conv2DTranspose": (L.Conv2DTranspose(4, 3, strides=2), [img]),
        "Conv3DTranspose": (L.Conv3DTranspose(2, 3), [vol]),
        "SeparableConv1D": (L.SeparableConv1D(4, 3), [seq]),
        "SeparableConv2D": (L.SeparableConv2D(4, 3), [img]),
        "DepthwiseConv1D": (L.DepthwiseConv1D(3), [seq]),
        "DepthwiseConv2D": (L.DepthwiseConv2D(3), [img]),
        "MaxPooling1D": (L.MaxPooling1D(2), [seq]),
        "MaxPooling2D": (L.MaxPooling2D(2), [img]),
        "MaxPooling3D": (L.MaxPooling3D(2), [vol]),
        "AveragePooling1D": (L.AveragePooling1D(2), [seq]),
        "AveragePooling2D": (L.AveragePooling2D(2), [img]),
        "AveragePooling3D": (L.AveragePooling3D(2), [vol]),
        "GlobalAveragePooling2D": (L.GlobalAveragePooling2D(), [img]),
        "GlobalMaxPooling2D": (L.GlobalMaxPooling2D(), [img]),
        "BatchNormalization": (L.BatchNormalization(), [img]),
        "LayerNormalization": (L.LayerNormalization(), [seq]),
        "GroupNormalization": (L.GroupNormalization(groups=1), [img]),
        "UnitNormalization": (L.UnitNormalization(), [seq]),
        "Dropout": (L.Dropout(0.3), [seq]),
        "SpatialDropout2D": (L.SpatialDropout2D(0.3), [img]),
        "GaussianNoise": (L.GaussianNoise(0.1), [seq]),
        "GaussianDropout": (L.GaussianDropout(0.1), [seq]),
        "AlphaDropout": (L.AlphaDropout(0.1), [seq]),
        "ActivityRegularization": (L.ActivityRegularization(0.01, 0.01), [seq]),
        "Embedding": (L.Embedding(50, 8), [_ints(50, 2, 10)]),
        "SimpleRNN": (L.SimpleRNN(6), [seq]),
        "LSTM": (L.LSTM(6, return_sequences=True), [seq]),
        "GRU": (L.GRU(6), [seq]),
        "Bidirectional LSTM": (L.Bidirectional(L.LSTM(4)), [seq]),
        "ConvLSTM2D": (L.ConvLSTM2D(2, 3), [_f(2, 3, 8, 8, 2)]),
        "MultiHeadAttention": (L.MultiHeadAttention(2, 4), [seq, seq]),
        "Attention": (L.Attention(), [seq, seq], True),
        "AdditiveAttention": (L.AdditiveAttention(), [seq, seq], True),
        "Flatten": (L.Flatten(), [img]),
        "Reshape": (L.Reshape((80,)), [seq]),
        "Permute": (L.Permute((2, 1)), [seq]),
        "RepeatVector": (L.RepeatVector(3), [_f(2, 8)]),
        "UpSampling1D": (L.UpSampling1D(), [seq]),
        "UpSampling2D nearest": (L.UpSampling2D(), [img]),
        "UpSampling2D bilinear": (L.UpSampling2D(interpolation="bilinear"), [img]),
        "UpSampling3D": (L.UpSampling3D(), [vol]),
        "ZeroPadding2D": (L.ZeroPadding2D(), [img]),
        "Cropping2D": (L.Cropping2D(2), [img]),
        "Concatenate": (L.Concatenate(), [seq, seq], True),
        "Add": (L.Add(), [seq, seq], True),
        "Multiply": (L.Multiply(), [seq, seq], True),
        "Average": (L.Average(), [seq, seq], True),
        "Maximum": (L.Maximum(), [seq, seq], True),
        "Subtract": (L.Subtract(), [seq, seq], True),
        "Dot": (L.Dot(axes=2), [seq, seq], True),
        "LeakyReLU": (L.LeakyReLU(), [seq]),
        "PReLU": (L.PReLU(), [seq]),
        "ELU": (L.ELU(), [seq]),
        "ReLU": (L.ReLU(max_value=6.0), [seq]),
        "Softmax": (L.Softmax(), [seq]),
        "Normalization": (L.Normalization(mean=0.5, variance=2.0), [seq]),
        "Rescaling": (L.Rescaling(1 / 255.0), [img]),
        "Resizing": (L.Resizing(8, 8), [img]),
        "Resizing bicubic": (L.Resizing(8, 8, interpolation="bicubic"), [img]),
        "Resizing area": (L.Resizing(8, 8, interpolation="area"), [img]),
        "CenterCrop": (L.CenterCrop(8, 8), [img]),
        "RandomCrop": (L.RandomCrop(8, 8), [img]),
        "RandomFlip": (L.RandomFlip(), [img]),
        "RandomRotation": (L.RandomRotation(0.2), [img]),
        "RandomZoom": (L.RandomZoom(0.2), [img]),
        "RandomTranslation": (L.RandomTranslation(0.1, 0.1), [img]),
        "RandomContrast": (L.RandomContrast(0.2), [img]),
        "RandomBrightness": (L.RandomBrightness(0.2), [img]),
        "Discretization": (L.Discretization(bin_boundaries=[-0.5, 0.0, 0.5]), [seq]),
        "CategoryEncoding": (L.CategoryEncoding(8, output_mode="multi_hot"), [_ints(8, 2, 3)]),
        "IntegerLookup": (L.IntegerLookup(vocabulary=[1, 2, 3]), [_ints(5, 2, 4)]),
    }
    for name, act in (("relu", "relu"), ("gelu", "gelu"), ("swish", "swish"), ("mish", "mish"),
                      ("softplus", "softplus"), ("softsign", "softsign"), ("selu", "selu"),
                      ("elu", "elu"), ("hard_sigmoid", "hard_sigmoid"), ("hard_swish", "hard_swish"),
                      ("tanh", "tanh"), ("sigmoid", "sigmoid"), ("log_softmax", "log_softmax"),
                      ("relu6", "relu6"), ("exponential", "exponential"), ("linear", "linear")):
        cases[f"Activation {name}"] = (L.Activation(act), [seq])
    keras.utils.set_random_seed(0)
    for name, (layer, inputs, *as_list) in cases.items():
        yield name, lambda layer=layer, inputs=inputs, as_list=as_list: _train_trace(layer, inputs, *as_list)
    yield "TextVectorization", _text_vectorization


def _text_vectorization():
    import keras
    tv = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=6)
    tv.adapt(["the cat sat", "a dog ran far", "the end"])
    return _trace(lambda s: tv(s), tf.TensorSpec([None], tf.string))


_APPLICATIONS = {   # model name -> input size (the smallest each accepts)
    "MobileNet": 32, "MobileNetV2": 32, "MobileNetV3Small": 32, "ResNet50": 32, "ResNet50V2": 32,
    "DenseNet121": 32, "EfficientNetB0": 32, "EfficientNetV2B0": 32, "VGG16": 32, "Xception": 71,
    "InceptionV3": 75, "NASNetMobile": 32, "ConvNeXtTiny": 32,
}


def application_workloads():
    import keras
    for name, size in _APPLICATIONS.items():
        def trace(name=name, size=size):
            model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classes=10)
            return _train_trace(model, [_f(2, size, size, 3)])
        yield name, trace


def nlp_workloads():
    import keras
    from keras import layers as L

    class PositionEmbedding(L.Layer):          # keras_hub.layers.PositionEmbedding's computation
        def build(self, shape):
            self.table = self.add_weight(shape=(shape[1], shape[2]), initializer="glorot_uniform")

        def call(self, x):
            positions = tf.range(tf.shape(x)[1])
            return x + tf.gather(self.table, positions)[tf.newaxis]

    def encoder(causal):
        tokens = keras.Input((12,), dtype="int32")
        x = L.Embedding(100, 16)(tokens)
        x = PositionEmbedding()(x)
        y = L.MultiHeadAttention(2, 8)(x, x, use_causal_mask=causal)
        x = L.LayerNormalization()(x + L.Dropout(0.1)(y))
        y = L.Dense(16)(L.Dense(32, activation="gelu")(x))
        x = L.LayerNormalization()(x + y)
        return keras.Model(tokens, L.Dense(100)(x))

    yield "TransformerEncoder", lambda: _train_trace(encoder(False), [_ints(100, 2, 12)])
    yield "TransformerDecoder (causal)", lambda: _train_trace(encoder(True), [_ints(100, 2, 12)])

    def masked_lm():
        tokens = keras.Input((12,), dtype="int32")
        x = L.Embedding(100, 16, mask_zero=True)(tokens)
        x = L.LSTM(16, return_sequences=True)(x)
        return keras.Model(tokens, L.Dense(100)(x))
    yield "Masked LSTM LM", lambda: _train_trace(masked_lm(), [_ints(100, 2, 12)])

    def loss_trace():
        logits, labels = _f(4, 10), _ints(10, 4)
        return _trace(lambda lg, lb: [keras.losses.sparse_categorical_crossentropy(lb, lg, from_logits=True),
                                      keras.metrics.sparse_top_k_categorical_accuracy(lb, lg, k=3)],
                      tf.TensorSpec(logits.shape), tf.TensorSpec(labels.shape, tf.int32))
    yield "losses and top-k metrics", loss_trace


def api_workloads():
    S = tf.TensorSpec
    img, mat, vec = S([2, 8, 8, 3]), S([3, 4, 4]), S([16])
    spd = lambda m: tf.matmul(m, m, transpose_b=True) + 4.0 * tf.eye(4)     # noqa: E731
    apis = {
        "image.resize bilinear/nearest/bicubic/area": (lambda x: [tf.image.resize(x, [5, 5], m) for m in
                                                          ("bilinear", "nearest", "bicubic", "area")], img),
        "image.crop_and_resize": (lambda x: tf.image.crop_and_resize(
            x, [[0.1, 0.1, 0.8, 0.9]], [0], [4, 4]), img),
        "image.rgb_to_hsv/hsv_to_rgb": (lambda x: tf.image.hsv_to_rgb(tf.image.rgb_to_hsv(tf.abs(x))), img),
        "image.adjust_contrast/hue/saturation": (lambda x: [tf.image.adjust_contrast(x, 1.5),
                                                            tf.image.adjust_hue(tf.abs(x), 0.1),
                                                            tf.image.adjust_saturation(tf.abs(x), 1.5)], img),
        "image.flip/rot90/transpose": (lambda x: [tf.image.flip_left_right(x), tf.image.rot90(x),
                                                  tf.image.transpose(x)], img),
        "image.extract_patches": (lambda x: tf.image.extract_patches(x, [1, 3, 3, 1], [1, 2, 2, 1],
                                                                     [1, 1, 1, 1], "VALID"), img),
        "image.sobel/ssim/psnr": (lambda x: [tf.image.sobel_edges(x), tf.image.psnr(x, x * 0.9, 2.0)], img),
        "image.non_max_suppression": (lambda b, s: tf.image.non_max_suppression(b, s, 3),
                                      S([8, 4]), S([8])),
        "signal.fft/ifft/rfft/irfft": (lambda x: [tf.signal.irfft(tf.signal.rfft(x)),
                                                  tf.signal.ifft(tf.signal.fft(tf.complex(x, x)))], vec),
        "signal.fft2d/rfft2d": (lambda x: [tf.signal.irfft2d(tf.signal.rfft2d(x))], mat),
        "signal.stft": (lambda x: tf.abs(tf.signal.stft(x, 8, 4)), vec),
        "linalg.inv/det/slogdet/solve": (lambda m: [tf.linalg.inv(spd(m)), tf.linalg.det(spd(m)),
                                                    tf.linalg.slogdet(spd(m))[1],
                                                    tf.linalg.solve(spd(m), m)], mat),
        "linalg.cholesky/qr/svd/eigh": (lambda m: [tf.linalg.cholesky(spd(m)), tf.linalg.qr(m)[1],
                                                   tf.linalg.svd(m, compute_uv=False),
                                                   tf.linalg.eigh(spd(m))[0]], mat),
        "linalg.band_part/diag/triangular_solve": (lambda m: [
            tf.linalg.band_part(m, 1, 0), tf.linalg.diag_part(m), tf.linalg.set_diag(m, m[..., 0]),
            tf.linalg.triangular_solve(tf.linalg.band_part(spd(m), -1, 0), m)], mat),
        "math.segment/unsorted_segment": (lambda x: [
            tf.math.segment_sum(x, tf.constant([0] * 8 + [1] * 8)),
            tf.math.unsorted_segment_max(x, tf.constant([0, 1] * 8), 2),
            tf.math.unsorted_segment_mean(x, tf.constant([0, 1] * 8), 2)], vec),
        "math.top_k/sort/argsort/in_top_k": (lambda x: [tf.math.top_k(x, 3).values, tf.sort(x),
                                                        tf.argsort(x)], vec),
        "math.unique/where/boolean_mask": (lambda x: [tf.unique(tf.round(x)).y, tf.where(x > 0),
                                                      tf.boolean_mask(x, x > 0)], vec),
        "math.special (lgamma, digamma, bessel, erfinv)": (lambda x: [
            tf.math.lgamma(tf.abs(x) + 1), tf.math.digamma(tf.abs(x) + 1), tf.math.bessel_i0e(x),
            tf.math.erfinv(x * 0.5), tf.math.igamma(tf.abs(x) + 1, tf.abs(x))], vec),
        "math.cumulative_logsumexp/reduce_euclidean_norm": (lambda x: [
            tf.math.cumulative_logsumexp(x), tf.math.reduce_euclidean_norm(x)], vec),
        "math.bincount/histogram": (lambda x: [tf.math.bincount(tf.cast(tf.abs(x) * 4, tf.int32)),
                                               tf.histogram_fixed_width(x, [-1.0, 1.0], 5)], vec),
        "nn.lrn/moments/batch_norm": (lambda x: [tf.nn.local_response_normalization(x),
                                                 tf.compat.v1.nn.fused_batch_norm(x, tf.ones(3), tf.zeros(3))[0]], img),
        "nn.max_pool_with_argmax/dilation2d": (lambda x: [tf.nn.max_pool_with_argmax(x, 2, 2, "SAME")[0],
                                                          tf.nn.dilation2d(x, tf.ones([2, 2, 3]), [1, 1, 1, 1],
                                                                           "SAME", "NHWC", [1, 1, 1, 1])], img),
        "nn.space_to_depth/depth_to_space/space_to_batch": (lambda x: [
            tf.nn.depth_to_space(tf.nn.space_to_depth(x, 2), 2),
            tf.space_to_batch_nd(x, [2, 2], [[0, 0], [0, 0]])], img),
        "array.reverse/roll/one_hot/linspace": (lambda x: [tf.reverse(x, [0]), tf.roll(x, 3, 0),
                                                           tf.one_hot(tf.cast(tf.abs(x) * 3, tf.int32), 4),
                                                           tf.linspace(0.0, 1.0, 5) * x[0]], vec),
        "array.dynamic_stitch/partition": (lambda x: tf.dynamic_stitch(
            tf.dynamic_partition(tf.range(16), tf.range(16) % 2, 2), tf.dynamic_partition(x, tf.range(16) % 2, 2)),
            vec),
        "array.searchsorted/bucketize": (lambda x: [tf.searchsorted(tf.sort(x), x),
                                                    tf.raw_ops.Bucketize(input=x, boundaries=[-0.5, 0.5])], vec),
        "array.tensor_scatter/clip": (lambda x: [tf.tensor_scatter_nd_update(x, [[1], [3]], x[:2]),
                                                 tf.clip_by_value(x, -0.5, 0.5),
                                                 tf.clip_by_norm(x, 1.0)], vec),
        "random.uniform int/categorical": (lambda x: [
            tf.random.stateless_uniform([4], [1, 2], 0, 10, tf.int32),
            tf.random.stateless_categorical(x[None], 3, [1, 2])], vec),
    }
    for name, (fn, *specs) in apis.items():
        yield name, lambda fn=fn, specs=specs: _with_gradient(fn, lambda: [], *specs)


def compat_v1_workloads():
    v1 = tf.compat.v1
    optimizers = {
        "GradientDescent": lambda: v1.train.GradientDescentOptimizer(0.25),
        "Momentum": lambda: v1.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
        "Adam": lambda: v1.train.AdamOptimizer(0.01),
        "Adagrad": lambda: v1.train.AdagradOptimizer(0.1),
        "AdagradDA": lambda: v1.train.AdagradDAOptimizer(0.1, tf.Variable(0, dtype=tf.int64)),
        "Adadelta": lambda: v1.train.AdadeltaOptimizer(1.0),
        "RMSProp": lambda: v1.train.RMSPropOptimizer(0.01, momentum=0.9, centered=True),
        "Ftrl": lambda: v1.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.1),
        "ProximalAdagrad": lambda: v1.train.ProximalAdagradOptimizer(0.1, l1_regularization_strength=0.01),
        "ProximalGradientDescent": lambda: v1.train.ProximalGradientDescentOptimizer(0.1, 0.01),
    }
    for name, make in optimizers.items():
        def trace(make=make):
            w, emb = tf.Variable(tf.ones([4, 2])), tf.Variable(tf.ones([10, 4]))
            opt = make()

            def step(ids):
                loss = lambda: tf.reduce_sum(tf.matmul(tf.gather(emb, ids), w) ** 2)   # noqa: E731
                opt.minimize(loss, var_list=[w, emb])
                return tf.constant(0)
            return _trace(step, tf.TensorSpec([3], tf.int32))
        yield f"compat.v1 {name}", trace


GROUPS = {"layers": layer_workloads, "applications": application_workloads, "nlp": nlp_workloads,
          "apis": api_workloads, "compat_v1": compat_v1_workloads}


def collect(groups):
    """{op: {"count": occurrences, "workloads": [names]}} and the workloads that failed to trace."""
    usage, failed = {}, {}
    for group in groups:
        for name, trace in GROUPS[group]():
            label = f"{group}: {name}"
            try:
                found = trace()
            except Exception as e:                                   # noqa: BLE001
                failed[label] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}"
                continue
            for op, n in found.items():
                entry = usage.setdefault(op, {"count": 0, "workloads": []})
                entry["count"] += n
                entry["workloads"].append(label)
    return usage, failed


def markdown(usage, failed, groups):
    rows = sorted(((op, npu_status(op), u) for op, u in usage.items()),
                  key=lambda r: (-len(r[2]["workloads"]), -r[2]["count"], r[0]))
    status_rows = {s: [r for r in rows if r[1] == s] for s in ("cpu", "host", "npu")}
    n_workloads = len({w for u in usage.values() for w in u["workloads"]})
    lines = [
        "# Ops real programs run, ranked",
        "",
        f"Generated by `python -m tools.op_ranking` (do not edit; groups: {', '.join(groups)}): "
        f"{n_workloads} traced workloads (forward + gradient or optimizer step; see the script's "
        "docstring). An op runs on the NPU when it has an NPU or device-default kernel; host ops "
        "are ones no accelerator runs (strings, tables, tf.data); the rest fall back to the CPU.",
        "",
        f"{len(rows)} distinct ops: {len(status_rows['npu'])} on the NPU, "
        f"{len(status_rows['cpu'])} falling back to the CPU, {len(status_rows['host'])} host by nature.",
        "",
        "## Falling back to the CPU (ranked by the number of workloads using them)",
        "",
        "| op | workloads | occurrences | e.g. |",
        "|---|---|---|---|",
    ]
    lines += [f"| {op} | {len(u['workloads'])} | {u['count']} | {', '.join(u['workloads'][:3])} |"
              for op, _, u in status_rows["cpu"]] or ["| (none) | | | |"]
    lines += ["", "## Host by nature", "", "| op | workloads | e.g. |", "|---|---|---|"]
    lines += [f"| {op} | {len(u['workloads'])} | {', '.join(u['workloads'][:3])} |"
              for op, _, u in status_rows["host"]] or ["| (none) | | |"]
    lines += ["", "## On the NPU", "", "| op | workloads | occurrences |", "|---|---|---|"]
    lines += [f"| {op} | {len(u['workloads'])} | {u['count']} |" for op, _, u in status_rows["npu"]]
    if failed:
        lines += ["", "## Workloads that did not trace", ""]
        lines += [f"- {name}: {why}" for name, why in failed.items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help=f"comma-separated groups ({', '.join(GROUPS)}); default all")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "op_ranking.md"),
                   help="markdown file to write, or - for stdout")
    args = p.parse_args(argv)
    groups = args.only.split(",") if args.only else list(GROUPS)
    unknown = set(groups) - set(GROUPS)
    if unknown:
        p.error(f"unknown groups {sorted(unknown)}; allowed: {', '.join(GROUPS)}")
    usage, failed = collect(groups)
    text = markdown(usage, failed, groups)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    falling = [op for op in usage if npu_status(op) == "cpu"]
    print(f"{len(usage)} ops, {len(falling)} falling back to the CPU, {len(failed)} workloads did not trace",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
