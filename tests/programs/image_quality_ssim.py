"""Image quality in a training loss: a small denoising CNN trained with Keras fit on
1 - MS-SSIM + MSE (40 images in batches of 16: a partial last batch), then PSNR, SSIM and
MS-SSIM of resized predictions in a tf.function. tf.image's shape checks (ShapeN, Asserts)
become Grappler-materialized constants ordered after a cluster member: the partitioned graph
was cyclic, so TF ran every such function op by op."""
import keras
import numpy as np
import tensorflow as tf

TOLERANCE = dict(rtol=2e-4, atol=2e-5)
# the train step at batch 16 and 8 (split around the checks), predict, the metrics function;
# op by op (the cyclic graph) it was 103
MAX_COMPILES = 40
MAX_SIGNATURES_PER_CLUSTER = 2


def run(device):
    rng = np.random.default_rng(5)
    grid = np.linspace(0, 3, 32, dtype=np.float32)
    phase = rng.uniform(0, 3, size=(40, 1, 1, 1)).astype(np.float32)
    clean = (0.5 + 0.4 * np.sin(grid[None, :, None, None] + phase) *
             np.cos(grid[None, None, :, None] * 2 - phase)).astype(np.float32)
    noisy = np.clip(clean + 0.1 * rng.standard_normal(clean.shape), 0, 1).astype(np.float32)

    def loss(y, p):
        msssim = tf.image.ssim_multiscale(y, p, 1.0, power_factors=(0.5, 0.5), filter_size=3)
        return 1.0 - tf.reduce_mean(msssim) + tf.reduce_mean(tf.square(y - p))

    @tf.function
    def metrics(a, b):
        big_a, big_b = tf.image.resize(a, [48, 48]), tf.image.resize(b, [48, 48])
        return (tf.image.psnr(a, b, 1.0), tf.image.ssim(a, b, 1.0, filter_size=5),
                tf.image.ssim_multiscale(big_a, big_b, 1.0, power_factors=(0.5, 0.5),
                                         filter_size=3))

    with tf.device(device):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([
            keras.Input((32, 32, 1)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(1, 3, padding="same", activation="sigmoid")])
        model.compile(keras.optimizers.SGD(0.05), loss)
        history = model.fit(noisy, clean, batch_size=16, epochs=2, shuffle=False, verbose=0)
        pred = model.predict(noisy[:8], batch_size=8, verbose=0)
        psnr, ssim, msssim = metrics(tf.constant(clean[:8]), tf.constant(pred))
    out = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
    return dict(out, loss=history.history["loss"], pred=pred, psnr=psnr, ssim=ssim,
                msssim=msssim)
