"""OCR-style sequence labelling trained with CTC (keras.io captcha OCR / CTC ASR, small): a
Conv1D + bidirectional GRU over spectrogram-like frames from tf.signal.stft, CTC loss
(tf.nn.ctc_loss via keras.ops.ctc_loss) with label and logit lengths, greedy CTC decode."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=5e-4, atol=5e-4)
MAX_COMPILES = 150
TIMEOUT = 400
CLASSES = 6   # 5 symbols + blank


def run(device):
    rng = np.random.default_rng(19)
    audio = rng.normal(size=(10, 400)).astype("float32")
    labels = rng.integers(1, CLASSES, (10, 4)).astype("int32")
    label_len = rng.integers(2, 5, (10,)).astype("int32")
    keras.utils.set_random_seed(0)
    with tf.device(device):
        spec = tf.abs(tf.signal.stft(audio, frame_length=64, frame_step=32, fft_length=64))
        spec = tf.math.log(spec + 1e-6)
        inp = keras.Input(spec.shape[1:])
        h = keras.layers.Conv1D(16, 3, padding="same", activation="relu")(inp)
        h = keras.layers.Bidirectional(keras.layers.GRU(8, return_sequences=True))(h)
        model = keras.Model(inp, keras.layers.Dense(CLASSES)(h))
        opt = keras.optimizers.Adam(0.01)
        frames = spec.shape[1]

        @tf.function
        def step(x, y, ylen):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.reduce_mean(tf.nn.ctc_loss(
                    labels=y, logits=logits, label_length=ylen,
                    logit_length=tf.fill([tf.shape(x)[0]], frames), logits_time_major=False,
                    blank_index=0))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        losses = [float(step(spec, labels, label_len)) for _ in range(3)]
        logits = model(spec)
        decoded, _ = tf.nn.ctc_greedy_decoder(tf.transpose(logits, [1, 0, 2]),
                                              tf.fill([10], frames), blank_index=0)
        return {"losses": losses, "logits": logits.numpy(),
                "decoded": tf.sparse.to_dense(decoded[0]).numpy()}
