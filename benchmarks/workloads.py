"""The benchmark models: builders and one fixed batch each, sized so that a full run takes
minutes on two cores (small images, small batches; weights=None, nothing is downloaded)."""
import dataclasses

import numpy as np


@dataclasses.dataclass
class Workload:
    name: str
    build: object          # () -> keras.Model
    batch: object          # () -> (x, y) numpy arrays
    from_logits: bool      # the model outputs logits (no softmax layer)


def _mlp():
    import keras
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                             keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])


def _cnn():
    import keras
    L = keras.layers
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        L.Conv2D(32, 3, padding="same", activation="relu"), L.MaxPooling2D(),
        L.Conv2D(64, 3, padding="same", activation="relu"), L.MaxPooling2D(),
        L.Conv2D(64, 3, padding="same", activation="relu"), L.GlobalAveragePooling2D(),
        L.Dense(10)])


def _application(name, size):
    def build():
        import keras
        return getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                                 classes=10)
    return build


def _bert(vocab=1000, seq=32, dim=64, heads=4, blocks=2):
    """Embedding + post-norm transformer blocks (MultiHeadAttention, gelu feed-forward)."""
    def build():
        import keras
        L = keras.layers
        tokens = keras.Input((seq,), dtype="int32")
        h = L.Embedding(vocab, dim)(tokens)
        for _ in range(blocks):
            a = L.MultiHeadAttention(heads, dim // heads)(h, h)
            h = L.LayerNormalization()(h + a)
            f = L.Dense(4 * dim, activation="gelu")(h)
            h = L.LayerNormalization()(h + L.Dense(dim)(f))
        return keras.Model(tokens, L.Dense(vocab)(h))
    return build


def _lstm_text(vocab=2000, seq=40, dim=32, units=64):
    """A text classifier: masked Embedding + LSTM + Dense (the keras.io IMDB example, small)."""
    def build():
        import keras
        L = keras.layers
        return keras.Sequential([keras.Input((seq,), dtype="int32"),
                                 L.Embedding(vocab, dim, mask_zero=True), L.LSTM(units),
                                 L.Dense(2)])
    return build


def _gru_series(steps=30, features=8, units=32):
    """A time-series model: GRU over 30 steps of 8 features, then Dense."""
    def build():
        import keras
        return keras.Sequential([keras.Input((steps, features)), keras.layers.GRU(units),
                                 keras.layers.Dense(10)])
    return build


def _padded_tokens():
    rng = np.random.default_rng(0)
    t = rng.integers(1, 2000, (16, 40)).astype(np.int32)
    t[np.arange(40)[None, :] >= rng.integers(10, 40, 16)[:, None]] = 0    # padding, masked
    return t, rng.integers(0, 2, 16).astype(np.int32)


def _series():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 30, 8)).astype(np.float32), rng.integers(0, 10, 16).astype(np.int32)


def _images(batch, size):
    def make():
        rng = np.random.default_rng(0)
        return (rng.random((batch, size, size, 3), dtype=np.float32),
                rng.integers(0, 10, batch).astype(np.int32))
    return make


def _features():
    rng = np.random.default_rng(0)
    return rng.random((64, 784), dtype=np.float32), rng.integers(0, 10, 64).astype(np.int32)


def _tokens():
    t = np.random.default_rng(0).integers(0, 1000, (8, 32)).astype(np.int32)
    return t, t


WORKLOADS = {w.name: w for w in [
    Workload("mlp", _mlp, _features, True),
    Workload("cnn", _cnn, _images(16, 32), True),
    Workload("mobilenetv2", _application("MobileNetV2", 64), _images(4, 64), False),
    Workload("resnet50", _application("ResNet50", 64), _images(4, 64), False),
    Workload("densenet121", _application("DenseNet121", 64), _images(4, 64), False),
    Workload("bert", _bert(), _tokens, True),
    Workload("lstm_text", _lstm_text(), _padded_tokens, True),
    Workload("gru_series", _gru_series(), _series, True),
]}
QUICK = ("mlp", "cnn")
FIRST_STEP = tuple(WORKLOADS)          # benchmarks/first_step.py's default


def select(names):
    """Workloads by name, in the given order; unknown names are an error listing the known."""
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(WORKLOADS)}")
    return [WORKLOADS[n] for n in names]
