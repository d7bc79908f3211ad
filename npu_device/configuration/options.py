"""The table of npu_device options: one entry per option drives validation, `set_npu_config`,
`get_npu_config`, NPU_* environment defaults and the generated docs/options.md.

Each parser turns a value given from Python, or an environment string, into the canonical value
and raises ValueError with the reason; parse() adds the option's name and the allowed values
(and treats None as "unset").
"""
import difflib
import os
import re
from typing import Callable, NamedTuple

# When an option may change. Options that size devices can only be set before TF creates them.
BEFORE_INIT = "before device init"
ANY_TIME = "any time"
NEXT_COMPILE = "any time; graphs compiled afterwards"

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Option(NamedTuple):
    name: str
    parse: Callable      # (value) -> canonical value; raises ValueError with the reason
    allowed: str         # the allowed values, as said in errors and in the docs
    default: object
    when: str            # BEFORE_INIT, ANY_TIME or NEXT_COMPILE
    description: str
    compile: bool = False  # part of the compile fingerprint (changes the compiled graph)

    @property
    def env(self):
        return "NPU_" + self.name.upper()


def choice(*values):
    def parse(value):
        if isinstance(value, str) and value.strip() in values:
            return value.strip()
        close = difflib.get_close_matches(str(value), values, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{value!r} is not an allowed value{hint}")
    return parse


def boolean(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):  # Ascend scripts often pass 0/1
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise ValueError(f"{value!r} is not a boolean")


def integer(lo, hi=None):
    def parse(value):
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not an integer")
        if value < lo or (hi is not None and value > hi):
            raise ValueError(f"{value} is out of range")
        return value
    return parse


def size_in_bytes(minimum, maximum=None):
    # Same syntax as the native runtime's NPU_HBM_SIZE parser: an integer, optionally K/M/G/T.
    def parse(value):
        if isinstance(value, str):
            m = re.fullmatch(r"\s*(\d+)([KMGT]?)\s*", value)
            if not m:
                raise ValueError(f"{value!r} is not a size")
            value = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not a size")
        if value < minimum or (maximum is not None and value > maximum):
            raise ValueError(f"{value} bytes is out of range")
        return value
    parse.bytes = True  # lets the docs show sizes as '16G'
    return parse


def path(value):
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip() or \
            "\0" in str(value):
        raise ValueError(f"{value!r} is not a path")
    return os.path.expanduser(str(value).strip())


def dump_step_ranges(spec):
    """'0|5|10-20' -> ((0, 0), (5, 5), (10, 20)); ValueError on bad syntax or a reversed range."""
    ranges = []
    for part in spec.split("|"):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise ValueError(f"{part!r} in {spec!r} is neither a step nor a range a-b")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo > hi:
            raise ValueError(f"range {part.strip()!r} in {spec!r} ends before it starts")
        ranges.append((lo, hi))
    return tuple(ranges)


def dump_step(value):
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a step list")
    ranges = dump_step_ranges(value)
    return "|".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


MIXLIST_LISTS = ("black-list", "white-list", "gray-list")
MIXLIST_ACTIONS = ("to-add", "to-remove")


def mixlist(value):
    """Ascend's modify_mixlist: a JSON file or JSON text (or a dict) of
    {"black-list"|"white-list"|"gray-list": {"to-add": [op types], "to-remove": [op types]}}.
    Returns the normalised dict; op types must be TensorFlow ops."""
    from graph_engine.compiler.options import read_json    # light: no TF, no passes
    _, value = read_json(value)
    if not isinstance(value, dict):
        raise ValueError(f"the top level must be an object, got {type(value).__name__}")
    result, seen = {}, {}
    for list_name, actions in value.items():
        if list_name not in MIXLIST_LISTS:
            raise ValueError(f"unknown list {list_name!r}; lists are {', '.join(MIXLIST_LISTS)}")
        if not isinstance(actions, dict):
            raise ValueError(f"{list_name!r} must be an object with 'to-add'/'to-remove'")
        for action, ops in actions.items():
            if action not in MIXLIST_ACTIONS:
                raise ValueError(f"unknown key {action!r} in {list_name!r}; keys are "
                                 f"{', '.join(MIXLIST_ACTIONS)}")
            if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
                raise ValueError(f"{list_name}.{action} must be a list of op type names")
            for op in ops:
                _check_op_type(op)
                where = (list_name, action)
                if seen.setdefault(op, where) != where:
                    other = seen[op]
                    raise ValueError(f"op {op!r} appears in both {other[0]}.{other[1]} and "
                                     f"{list_name}.{action}")
            result.setdefault(list_name, {})[action] = sorted(set(ops))
    return result


def pass_switches(value):
    """fusion_switch_file: a JSON file (or JSON text, or a dict) -> the normalised switches
    {name: "on"|"off"}, checked against the graph engine's pass names."""
    from graph_engine.compiler import pass_switches as switches   # lazy: loads the compiler
    return switches.load(value)


def _check_op_type(op):
    from tensorflow.python.framework import op_def_registry
    if op_def_registry.get(op) is not None:
        return
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session
    ops = op_def_pb2.OpList.FromString(
        pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    close = difflib.get_close_matches(op, [o.name for o in ops.op], n=3)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    raise ValueError(f"{op!r} is not a TensorFlow op type{hint}")


PRECISION_MODES = ("force_fp32", "cube_fp16in_fp32out", "force_fp16", "allow_fp32_to_fp16",
                   "must_keep_origin_dtype", "allow_mix_precision", "allow_mix_precision_fp16",
                   "allow_mix_precision_bf16", "allow_fp32_to_bf16")
PRECISION_MODES_V2 = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16",
                      "mixed_bfloat16")
# TF semantics by default (float32 stays float32, like CPU/GPU); Ascend trains with
# allow_fp32_to_fp16 by default, one option away.
DEFAULT_PRECISION_MODE = "must_keep_origin_dtype"
# Both vocabularies (and their aliases) map onto one canonical mode the graph engine implements.
CANONICAL_PRECISION = {
    "force_fp32": "cube_fp16in_fp32out", "cube_fp16in_fp32out": "cube_fp16in_fp32out",
    "force_fp16": "force_fp16", "allow_fp32_to_fp16": "allow_fp32_to_fp16",
    "must_keep_origin_dtype": "must_keep_origin_dtype",
    "allow_mix_precision": "allow_mix_precision_fp16",
    "allow_mix_precision_fp16": "allow_mix_precision_fp16",
    "allow_mix_precision_bf16": "allow_mix_precision_bf16",
    "allow_fp32_to_bf16": "allow_fp32_to_bf16",
    "fp16": "force_fp16", "origin": "must_keep_origin_dtype",
    "mixed_float16": "allow_mix_precision_fp16", "mixed_bfloat16": "allow_mix_precision_bf16",
}
MIXED_MODES = ("allow_mix_precision_fp16", "allow_mix_precision_bf16")  # canonical
OVERFLOW_MODES = ("saturation", "inf_nan")   # the runtime's enum order (npuSetOverflowMode)

_MAX_DEVICES = 8  # NPURT_MAX_DEVICES
_SIZE = "bytes: an int or an int with suffix K, M, G or T, e.g. '512M', '8G'"

OPTIONS = (
    Option("precision_mode", choice(*PRECISION_MODES), ", ".join(PRECISION_MODES),
           DEFAULT_PRECISION_MODE, NEXT_COMPILE,
           "How float32 graphs compute (Ascend names). force_fp32 = cube_fp16in_fp32out: matrix "
           "ops take fp16 and produce fp32, vector ops stay fp32; force_fp16: everything fp16; "
           "allow_fp32_to_fp16: matrix ops fp16, vector ops keep fp32 where they can; "
           "must_keep_origin_dtype: no change; allow_mix_precision(_fp16|_bf16): white/black/"
           "gray lists decide per op; allow_fp32_to_bf16: like allow_fp32_to_fp16 with bf16. "
           "The default applies only while precision_mode_v2 is unset.", compile=True),
    Option("precision_mode_v2", choice(*PRECISION_MODES_V2), ", ".join(PRECISION_MODES_V2),
           None, NEXT_COMPILE,
           "The newer names: fp16 = force_fp16, origin = must_keep_origin_dtype, mixed_float16 / "
           "mixed_bfloat16 = allow_mix_precision_fp16 / _bf16. Mutually exclusive with "
           "precision_mode.", compile=True),
    Option("modify_mixlist", mixlist,
           'path of a JSON file, or JSON text: {"black-list"|"white-list"|"gray-list": '
           '{"to-add": [ops], "to-remove": [ops]}}', None, NEXT_COMPILE,
           "Changes the mixed-precision lists (white: compute in fp16/bf16, black: keep fp32, "
           "gray: follow the producer). Only valid with a mixed precision mode.", compile=True),
    Option("overflow_mode", choice(*OVERFLOW_MODES), ", ".join(OVERFLOW_MODES), "saturation",
           ANY_TIME,
           "What a float16 store that overflows (|x| > 65504) writes: saturation = ±65504, as "
           "Ascend training chips do; inf_nan = ±inf (IEEE). Either way it raises the float "
           "status that npu_device.precision.float_status() and the loss scale optimizers "
           "(Keras's and NpuLossScaleOptimizer) read. "
           "npu_device.precision.set_overflow_mode() sets this option. Kernels run afterwards "
           "use it."),
    Option("deterministic", boolean, "true, false", False, NEXT_COMPILE,
           "Results bit-identical from run to run whatever the number of kernel threads "
           "(NPU_NUM_THREADS): kernels compiled afterwards (clusters and eager ops) split their "
           "work (matrix-product blocks, convolution-gradient and bias-gradient partial sums, "
           "parallel ranges) for a fixed 8 threads and add partial results in a fixed order, "
           "still running on all threads. Without it results may differ in the last bits "
           "between thread counts. Holds for one machine and build (kernel instruction set: "
           "npu_device.runtime.kernel_isa()); ops that run on CPU follow TensorFlow's own "
           "determinism.", compile=True),
    Option("graph_memory_max_size", size_in_bytes(1 << 20), _SIZE, None, NEXT_COMPILE,
           "Largest working memory one compiled graph may plan; a graph needing more fails to "
           "compile with the sizes in the message. Unset: bounded by hbm_size.", compile=True),
    Option("fusion_switch_file", pass_switches,
           'path of a JSON file (or JSON text) {"ALL"|PASS: "on"|"off"}; pass names in '
           'docs/passes.md', None, NEXT_COMPILE,
           "Turns graph-engine passes on or off one by one (like Ascend's fusion_switch_file); "
           '"ALL" sets every optional pass, named passes override it. Required passes (shape '
           "inference, folding, identity and dead-code elimination, precision, lowering, memory "
           "planning) always run. The file is read when the option is set.", compile=True),
    Option("enable_graph_kernel", boolean, "true, false", True, NEXT_COMPILE,
           "The elementwise-chain fusion pass (fuse_elementwise, docs/passes.md): connected "
           "elementwise and broadcast ops become one NpuElementwise kernel, bit-identical to the "
           "ops it replaces. false: every such op runs as its own kernel. The pass runs only "
           "when both this and fusion_switch_file let it (MindSpore's name for graph-kernel "
           "fusion, which scripts ported to Ascend pass).", compile=True),
    Option("dump_graph_path", path, "a directory", None, NEXT_COMPILE,
           "Write each compiled graph as text and Graphviz dot before the first pass and after "
           "every pass, as DIR/GRAPH/NN_PASS.txt and .dot. Unset: no graph dumps.",
           compile=True),
    Option("variable_memory_max_size", size_in_bytes(1 << 20), _SIZE, None, ANY_TIME,
           "Largest device memory the resource variables on each NPU may hold together. "
           "Creating or assigning a variable whose value would take them past it raises "
           "ResourceExhaustedError naming the variable, the limit and the sizes, and leaves the "
           "variable as it was; npu_device.memory_stats() reports variable_bytes. Values TF "
           "keeps in host memory (int32) are not counted. Applies to assignments made after "
           "it is set. Unset: bounded by hbm_size."),
    Option("device_count", integer(1, _MAX_DEVICES), f"an integer from 1 to {_MAX_DEVICES}", 1,
           BEFORE_INIT, "Number of NPU devices (NPU:0 ... NPU:n-1) the process gets."),
    Option("hbm_size", size_in_bytes(1 << 20, 1 << 40), _SIZE + ", from 1M to 1T", 16 << 30,
           BEFORE_INIT,
           "Memory capacity of each NPU device (the simulated device's pool)."),
    Option("device_id", integer(0, _MAX_DEVICES - 1),
           f"an integer from 0 to device_count - 1 (at most {_MAX_DEVICES - 1})", 0, ANY_TIME,
           "Device that npu_device.open() selects when called without an id. Checked against "
           "device_count when set (a ValueError names the allowed range), and for NPU_DEVICE_ID "
           "when npu_device is imported."),
    Option("iterations_per_loop", integer(1), "an integer >= 1", 1, ANY_TIME,
           "Steps run per host call (loop sinking). A Keras model compiled while an NPU is "
           "present gets steps_per_execution=N unless compile() is given steps_per_execution "
           "or run_eagerly=True: fit, evaluate and predict then run N batches per call of "
           "their tf.function, in a tf.while_loop whose NPU clusters compile once; the last "
           "call of an epoch runs the batches left. Step counts given explicitly (fit's "
           "steps_per_epoch and validation_steps, evaluate's and predict's steps) are rounded "
           "up to multiples of N, as Keras does for any steps_per_execution (it runs whole "
           "calls); npu_device warns once per model when one is not a multiple. Read when "
           "Model.compile() runs. "
           "npu_device.set_npu_loop_size(n) (Ascend's name) sets it."),
    Option("enable_dump", boolean, "true, false", False, ANY_TIME,
           "Write the tensors of every compiled-model run (NPU clusters and eager ops) that "
           "dump_step selects as .npy files under dump_path (which must be set), named after "
           "the TF node of each kernel, in their logical TF shape (NC1HWC0/FRACTAL_Z/FILTER_KN "
           "storage converted back), with a manifest.json per step; the model's inputs are always "
           "written. Also records every kernel whose float16 store overflowed (any step) under "
           "overflow/. Compare with TF on CPU: python -m npu_device.tools.compare_dump "
           "(docs/debugging.md). Runs starting after the change use it."),
    Option("dump_path", path, "a directory (created if missing; must be writable)", None,
           ANY_TIME,
           "Root of the tensor dumps: DIR/<date>-<pid>/<model>.<uid>/step<N>/ per process, "
           "model and step (docs/debugging.md)."),
    Option("dump_step", dump_step, "steps and ranges joined by '|', e.g. '0|5|10-20'", None,
           ANY_TIME, "Steps to dump: a step is one run of a compiled model, counted per "
           "compiled model from 0 in each process (a training step runs each of its clusters "
           "once). Unset: every step."),
    Option("dump_mode", choice("input", "output", "all"), "input, output, all", "output",
           ANY_TIME, "Which tensors of each kernel are dumped: its inputs (read before it "
           "runs), its outputs, or both."),
    Option("enable_profiling", boolean, "true, false", False, ANY_TIME,
           "Record every compiled-model run and every kernel (TF node, kernel, start, "
           "duration, bytes) as a Chrome-trace JSON file profiling_dir/npu_profile_<pid>.json "
           "(chrome://tracing, Perfetto), flushed every second and completed when profiling is "
           "turned off or the process exits. tf.profiler.experimental.start/stop records the "
           "same into TensorBoard's trace without this option (docs/debugging.md)."),
    Option("profiling_dir", path, "a directory (created if missing; must be writable)", None,
           ANY_TIME, "Where enable_profiling writes its trace file."),
    Option("op_compiler_cache_mode", choice("enable", "disable", "force"),
           "enable, disable, force", "enable", ANY_TIME,
           "Disk cache of compiled models (clusters and eager ops), keyed by the compile "
           "request (graph, input shapes and dtypes, compile-time values), the compile options, "
           "device memory and the compiler and runtime versions (hashes of the graph engine's "
           "source and of the runtime library). "
           "enable: load the model from op_compiler_cache_dir if there, else compile and store "
           "it; force: always compile, and store (overwriting); disable: never read or write "
           "the directory. Failed compiles are not stored; with dump_graph_path set every "
           "compile runs (to write the dumps). npu_device.compile_stats() counts "
           "disk_cache_hits and disk_cache_writes."),
    Option("op_compiler_cache_dir", path, "a directory", "~/.cache/npu_device", ANY_TIME,
           "Directory of the disk compile cache, created on first write; concurrent processes "
           "may share it. A corrupt entry is deleted and compiled again; a directory that "
           "cannot be read or written gives one warning and compiles go on without it."),
    Option("op_compiler_cache_max_size", size_in_bytes(1 << 20), _SIZE + ", at least 1M",
           1 << 30, ANY_TIME,
           "Bound on the disk compile cache. A writing process deletes the least recently used "
           "entries (by last hit or write) until the directory's entries fit; it lists the "
           "directory at its first write, then when its running total would pass the bound or "
           "60 s after the last listing, so processes writing at the same time can overshoot by "
           "what they wrote meanwhile. A model larger than the bound is not stored."),
    Option("log_level", choice("debug", "info", "warning", "error"), "debug, info, warning, error",
           "warning", ANY_TIME, "Level of the 'npu_device' Python logger."),
    Option("cpu_fallback", boolean, "true, false", True, ANY_TIME,
           "When the graph engine cannot compile a cluster or an op (anything but the "
           "program's own invalid input), run its TensorFlow ops on CPU instead, with one "
           "warning naming it and the reason. false: fail the step with the compile error "
           "(for tests and debugging the engine)."),
    Option("compile_cache_size", integer(1), "an integer >= 1", 1024, ANY_TIME,
           "Compiled models kept per process (eager ops and clusters); the least recently used "
           "is evicted first, freeing the device memory its constants hold."),
    Option("recompile_warning_threshold", integer(1), "an integer >= 1", 8, ANY_TIME,
           "Warn, once per NPU cluster, when it has compiled more than this many signatures "
           "(input shapes, or values of inputs that fix shapes), like TF's retracing warning."),
    Option("max_value_specializations", integer(1), "an integer >= 1", 16, ANY_TIME,
           "Compiles one NPU cluster may make, at one set of input shapes, for distinct values "
           "of its run-time shape inputs (a Reshape's shape, a range limit ...). Values beyond "
           "that run the cluster's TF ops on CPU, with one warning."),
    Option("log_compile_summary", boolean, "true, false", False, ANY_TIME,
           "Log one line per graph compile: ops placed on NPU / left on CPU and the time taken."),
)
BY_NAME = {o.name: o for o in OPTIONS}

# Options of Huawei's TF2 adapter (npu_device.global_options(), its NpuConfig) that mean nothing
# on this backend. set_npu_config / global_options() accept them, whatever the value, with one
# warning per name saying so, and ignore them; docs/options.md lists them with the reason. Any
# other unknown name is an error.
ASCEND_NO_EFFECT = {
    "graph_run_mode": "selects inference (0) or training (1) graphs for GE; this graph engine "
                      "compiles both the same way",
    "variable_format_optimize": "deprecated by Ascend; variables keep TensorFlow's ND layout "
                                "here and layouts are chosen per graph (docs/layouts.md)",
    "enable_scope_fusion_passes": "names Ascend's TensorFlow scope fusion passes; this engine's "
                                  "fusions are switched with fusion_switch_file",
    "op_select_implmode": "chooses high-precision or high-performance Ascend operator "
                          "implementations; each simulated kernel has one (float32 compute)",
    "optypelist_for_implmode": "the ops op_select_implmode applies to; see op_select_implmode",
    "op_precision_mode": "per-op implementation modes of Ascend operators; each simulated "
                         "kernel has one implementation (float32 compute)",
    "stream_max_parallel_num": "parallel AI CPU / AI Core streams; the simulated NPU runs a "
                               "graph's kernels in order on one stream",
    "hcom_parallel": "overlaps HCCL all-reduce with computation; collectives here are "
                     "TensorFlow's, scheduled by TF (docs/distributed.md)",
    "hcom_multi_mode": "HCCL multi-mode communication; collectives here are TensorFlow's "
                       "(docs/distributed.md)",
    "is_tailing_optimization": "overlaps the last all-reduce of distributed training with the "
                               "optimizer; collectives here are TensorFlow's, scheduled by TF "
                               "(docs/distributed.md)",
    "op_debug_level": "debug builds of Ascend (TBE) operator binaries; the simulated kernels "
                      "are compiled C++",
    "op_debug_config": "debug builds of Ascend (TBE) operator binaries; the simulated kernels "
                       "are compiled C++",
    "debug_dir": "where Ascend's operator compiler writes debug files; nothing is written",
    "enable_exception_dump": "dumps the inputs of an AI Core operator that raised an "
                             "exception; a failing kernel here raises a TensorFlow error naming "
                             "the node (tensor dumps: enable_dump)",
    "enable_small_channel": "a small-channel convolution layout for Ascend inference; the "
                            "layout passes choose convolution layouts",
    "graph_exec_timeout": "timeout of a graph execution on the device; simulated graphs run "
                          "synchronously on the host and do not time out",
    "topo_sorting_mode": "GE's node order (BFS/DFS); this engine orders kernels itself",
    "customize_dtypes": "per-op compute dtypes from a file; use modify_mixlist with a mixed "
                        "precision mode, or npu_device.keep_dtype_scope()",
    "overflow_flag": "enables overflow detection; the simulated NPU always records the float "
                     "status (npu_device.precision.float_status(); option overflow_mode)",
    "stream_sync_timeout": "timeout of stream waits on the device; simulated waits do not time "
                           "out",
    "event_sync_timeout": "timeout of event waits on the device; simulated waits do not time "
                          "out",
    "external_weight": "keeps weights outside Ascend's offline model file; compiled models "
                       "here embed their constants",
    "jit_compile": "chooses between compiling Ascend operators online and prebuilt binaries; "
                   "this engine always compiles graphs itself (Keras' jit_compile is handled "
                   "separately, see Keras and XLA)",
    "graph_compiler_cache_dir": "GE's compiled-graph cache; this engine caches compiled models "
                                "in op_compiler_cache_dir",
}


class UnknownOptionError(TypeError, AttributeError):
    """An option name that does not exist (an AttributeError too, for global_options())."""


def lookup(name):
    try:
        return BY_NAME[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), [*BY_NAME, *ASCEND_NO_EFFECT], n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        raise UnknownOptionError(f"unknown npu_device option {name!r}. {hint}Valid options: "
                                 f"{', '.join(sorted(BY_NAME))}") from None


def parse(option, value, source=None):
    """Canonical value of `value` for `option`; None resets it. `source` names where the value
    came from (an environment variable) for the error message."""
    if value is None:
        return None
    try:
        return option.parse(value)
    except ValueError as e:
        where = f" (from environment variable {source})" if source else ""
        raise ValueError(f"invalid value for npu_device option {option.name!r}{where}: {e}. "
                         f"Allowed: {option.allowed}") from None
