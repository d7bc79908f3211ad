"""Character-level sequence to sequence (keras.io lstm_seq2seq, small): an LSTM encoder's
return_state feeds the decoder LSTM's initial_state (teacher forcing), then inference models
built from the trained layers decode step by step; also a ConvLSTM2D frame predictor."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=5e-4, atol=5e-5)
MAX_COMPILES = 100
TIMEOUT = 400
TOKENS, UNITS = 6, 12


def run(device):
    rng = np.random.default_rng(17)
    enc_x = np.eye(TOKENS, dtype="float32")[rng.integers(0, TOKENS, (13, 7))]
    dec_x = np.eye(TOKENS, dtype="float32")[rng.integers(0, TOKENS, (13, 5))]
    dec_y = np.roll(dec_x, -1, axis=1)
    frames = rng.random((5, 4, 8, 8, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    out = {}
    with tf.device(device):
        e_in = keras.Input((None, TOKENS))
        _, h, c = keras.layers.LSTM(UNITS, return_state=True)(e_in)
        d_in = keras.Input((None, TOKENS))
        d_lstm = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)
        d_out, _, _ = d_lstm(d_in, initial_state=[h, c])
        d_dense = keras.layers.Dense(TOKENS, activation="softmax")
        model = keras.Model([e_in, d_in], d_dense(d_out))
        model.compile("rmsprop", "categorical_crossentropy")
        out["loss"] = model.fit([enc_x, dec_x], dec_y, batch_size=4, epochs=2, verbose=0).history["loss"]
        encoder = keras.Model(e_in, [h, c])
        s_h, s_c = keras.Input((UNITS,)), keras.Input((UNITS,))
        o, h2, c2 = d_lstm(d_in, initial_state=[s_h, s_c])
        decoder = keras.Model([d_in, s_h, s_c], [d_dense(o), h2, c2])
        states = encoder.predict(enc_x[:2], verbose=0)
        step = np.zeros((2, 1, TOKENS), "float32")
        decoded = []
        for _ in range(4):
            probs, sh, sc = decoder.predict([step] + list(states), verbose=0)
            decoded.append(probs[:, -1])
            step = np.eye(TOKENS, dtype="float32")[np.argmax(probs[:, -1], -1)][:, None]
            states = [sh, sc]
        out["decoded"] = np.stack(decoded)
        video = keras.Sequential([keras.Input((None, 8, 8, 1)),
                                  keras.layers.ConvLSTM2D(4, 3, padding="same", return_sequences=True),
                                  keras.layers.Conv3D(1, 3, padding="same", activation="sigmoid")])
        video.compile("adam", "mse")
        out["video_loss"] = video.fit(frames[:, :-1], frames[:, 1:], batch_size=2, epochs=1, verbose=0).history["loss"]
        out["video_pred"] = video.predict(frames[:2, :-1], verbose=0)
    return out
