"""A tiny GPT (keras.io text generation with a miniature GPT): token + position embeddings
(tf.range over the runtime length), causal MultiHeadAttention, a keras.utils.PyDataset feeding
fit, and greedy generation token by token with growing lengths."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=5e-4, atol=5e-5)
MAX_COMPILES = 60
MAX_SIGNATURES_PER_CLUSTER = 8     # generation: one signature per length (2-7), fit, predict
TIMEOUT = 300
VOCAB, MAXLEN, DIM = 50, 12, 16


class TokenAndPosition(keras.layers.Layer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.tok = keras.layers.Embedding(VOCAB, DIM)
        self.pos = keras.layers.Embedding(MAXLEN, DIM)

    def call(self, x):
        return self.tok(x) + self.pos(tf.range(tf.shape(x)[-1]))


class Batches(keras.utils.PyDataset):
    def __init__(self, x, batch):
        super().__init__()
        self.x, self.batch = x, batch

    def __len__(self):
        return (len(self.x) + self.batch - 1) // self.batch

    def __getitem__(self, i):
        b = self.x[i * self.batch:(i + 1) * self.batch]
        return b[:, :-1], b[:, 1:]


def run(device):
    rng = np.random.default_rng(13)
    data = rng.integers(1, VOCAB, (19, MAXLEN + 1)).astype("int32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        inp = keras.Input((None,), dtype="int32")
        h = TokenAndPosition()(inp)
        a = keras.layers.MultiHeadAttention(2, 8)(h, h, use_causal_mask=True)
        h = keras.layers.LayerNormalization()(h + a)
        h = keras.layers.LayerNormalization()(h + keras.layers.Dense(DIM)(keras.layers.Dense(32, activation="relu")(h)))
        model = keras.Model(inp, keras.layers.Dense(VOCAB)(h))
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        hist = model.fit(Batches(data, 8), epochs=2, verbose=0)
        tokens = [3, 7]
        for _ in range(6):
            logits = model.predict(np.array([tokens], "int32"), verbose=0)
            tokens.append(int(np.argmax(logits[0, -1])))
        return {"loss": hist.history["loss"], "tokens": tokens,
                "logits": model.predict(data[:5, :7], verbose=0)}
