"""RaggedTensorToTensor on the NPU (plugin kernel, tf_plugin_cc/ragged_ops.cc): Keras'
TextVectorization pads its ragged token ids with it. The sweep (npu_device/tools/cases/ragged.py)
checks values and gradients; here: the layer end to end, and hostile partitions raising TF's
errors (never a crash), each against TF on the CPU with soft placement off."""
import numpy as np
import pytest
import tensorflow as tf

import npu_device  # noqa: F401  (loads the plugin: the NPU device)

NPU, CPU = "/device:NPU:0", "/device:CPU:0"
_TEXT = ["the cat sat on the mat", "a dog", "", "the dog ate the cat food today"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("length", [4, None])     # cut and padded; padded to the longest
def test_text_vectorization_matches_cpu(no_soft_placement, length):
    import keras
    layer = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=length)
    layer.adapt(_TEXT)
    data = tf.constant(_TEXT)
    with tf.device(CPU):
        want = layer(data).numpy()
    with tf.device(NPU):
        traced = tf.function(layer)(data)
        eager = layer(data)            # RaggedTensorToTensor placed on the NPU as asked
    assert eager.device.endswith("NPU:0")
    np.testing.assert_array_equal(traced.numpy(), want)
    np.testing.assert_array_equal(eager.numpy(), want)


def _to_tensor(device, splits, shape=(-1, -1), types=("ROW_SPLITS",)):
    with tf.device(device):
        return tf.raw_ops.RaggedTensorToTensor(
            shape=np.array(shape, np.int64), values=np.arange(3, dtype=np.float32),
            default_value=np.float32(0), row_partition_tensors=[np.array(s, np.int64) for s in splits],
            row_partition_types=list(types)).numpy()


@pytest.mark.parametrize("splits,types", [
    ([[0, 2, 1]], ["ROW_SPLITS"]),                       # decreasing splits
    ([[1, 3]], ["ROW_SPLITS"]),                          # not starting at 0
    ([[0, 1, 3]], ["VALUE_ROWIDS"]),                     # row ids for the first dimension
    ([2, [0, 3, 1]], ["FIRST_DIM_SIZE", "VALUE_ROWIDS"]),  # a row id past the rows
    ([2, [0, -1, 1]], ["FIRST_DIM_SIZE", "VALUE_ROWIDS"]),  # a negative row id
    ([[]], ["ROW_SPLITS"]),                              # no splits at all
])
def test_bad_partitions_raise_as_on_cpu(no_soft_placement, splits, types):
    with pytest.raises(tf.errors.InvalidArgumentError) as cpu:
        _to_tensor(CPU, splits, types=types)
    with pytest.raises(tf.errors.InvalidArgumentError) as npu:
        _to_tensor(NPU, splits, types=types)
    assert npu.value.message.split(" [Op:")[0].split("}} ")[-1] == cpu.value.message.split(" [Op:")[0].split("}} ")[-1]


def test_splits_past_the_values_raise(no_soft_placement):
    # TF's CPU kernel reads past `values` here; the NPU's refuses
    with pytest.raises(tf.errors.InvalidArgumentError, match="describe 5 values but values has 3"):
        _to_tensor(NPU, [[0, 2, 5]])


def test_other_partition_types_are_unimplemented(no_soft_placement):
    with pytest.raises(tf.errors.UnimplementedError, match="ROW_LENGTHS"):
        _to_tensor(NPU, [[2, 1]], types=["ROW_LENGTHS"])
