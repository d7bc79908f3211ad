"""Precision comparison of an NPU tensor dump against TensorFlow on the CPU, in one command
(the Ascend dump + compare workflow; docs/debugging.md):

    # 1. run on the NPU with dumps on
    NPU_ENABLE_DUMP=1 NPU_DUMP_PATH=/tmp/dump NPU_DUMP_STEP=0 python train.py
    # 2. rank the ops by how far the NPU's values are from TensorFlow's on the CPU
    python -m npu_device.tools.compare_dump /tmp/dump --script train.py --function forward

The script is imported (keep its own run under `if __name__ == "__main__":`); `--function`
names the function the dump came from: a tf.function, a Keras model or a plain callable.
It is traced once on the CPU, only to get its graph, with example arguments from `--inputs` (a
function in the script returning the argument list; default: `inputs` if the script defines
one), else the tf.function's input_signature, else shapes and dtypes of the dumped tensors its
arguments were (an argument `x` that an NPU cluster read is the dumped tensor "x:0"). Every
dumped model's inputs (the
NPU cluster's input tensors at that step, variable reads included) are fed from the dump, so
each cluster is recomputed on the CPU from exactly the values the NPU started from, whatever
the variables hold in this process. Each dumped tensor is then compared with the TF tensor it
holds (the compiler records it: model.json "origins"), in float64:

    max_abs  max |npu - cpu|           max_rel  max_abs / max |cpu|
    mean_abs mean |npu - cpu|          cosine   cosine similarity of the flattened tensors

and the tensors are ranked, worst first (`--sort max_rel`, the default; or max_abs, or cosine,
lowest first). `--json FILE` writes every row plus what could not be compared and why.
`--module pkg.mod:function` imports a module instead of a script.

Python: `load_dump(path)` reads a dump (manifests, model.json, arrays on demand) and
`compare(path, fn, args)` returns a Comparison with .rows, .skipped and .table().
"""
import argparse
import dataclasses
import glob
import importlib
import importlib.util
import json
import math
import os
import sys

import numpy as np

SORT_KEYS = ("max_rel", "max_abs", "cosine")


# --- reading a dump --------------------------------------------------------------------------
@dataclasses.dataclass
class Tensor:
    """One dumped tensor (a manifest entry) and the TF tensor it holds."""
    model: str
    model_uid: int
    step: int
    kernel_index: int       # -1 for the model's inputs
    node: str               # the kernel's graph node ("" for model inputs)
    kernel: str
    kind: str               # "input", "output" or "model_input"
    index: int
    value: int              # value id in the model
    dtype: str
    shape: tuple
    format: str             # storage format on the NPU (the file holds the logical layout)
    path: str               # the .npy file, or None when it was skipped
    tf_tensor: str          # "node:index" of the TF tensor it holds, or None
    float_status: tuple = ()

    def load(self):
        return np.load(self.path)


@dataclasses.dataclass
class ModelDump:
    name: str
    uid: int
    device: int
    directory: str
    origins: list                     # per value id
    kernels: list                     # model.json kernels
    steps: dict                       # step -> [Tensor]
    overflow: dict                    # step -> [Tensor] of kernels whose float16 store overflowed


@dataclasses.dataclass
class Dump:
    directory: str                    # the process directory
    models: list                      # [ModelDump]

    def tensors(self, step=None):
        for m in self.models:
            for s, ts in sorted(m.steps.items()):
                if step is None or s == step:
                    yield from ts


def _process_dirs(path):
    """Directories holding model dumps (one per process) under `path`."""
    found = {os.path.dirname(os.path.dirname(p))
             for p in glob.glob(os.path.join(path, "**", "model.json"), recursive=True)}
    return sorted(found, key=os.path.getmtime)


def _read_steps(model_dir, sub, origins):
    steps = {}
    for manifest in glob.glob(os.path.join(model_dir, sub, "step*", "manifest.json")):
        with open(manifest) as f:
            m = json.load(f)
        folder = os.path.dirname(manifest)
        steps[m["step"]] = [Tensor(
            model=e["model"], model_uid=e["model_uid"], step=e["step"],
            kernel_index=e["kernel_index"], node=e["node"], kernel=e["kernel"], kind=e["kind"],
            index=e["index"], value=e["value"], dtype=e["dtype"], shape=tuple(e["shape"]),
            format=e["format"], path=os.path.join(folder, e["file"]) if e.get("file") else None,
            tf_tensor=origins[e["value"]] if e["value"] < len(origins) else None,
            float_status=tuple(e.get("float_status", ()))) for e in m["tensors"]]
    return steps


def load_dump(path, process=None):
    """The dump under `path` (a dump_path, one process's directory or a model's). Several
    processes dumped there: the newest, or the one whose directory name is `process`."""
    dirs = _process_dirs(path)
    if not dirs:
        raise FileNotFoundError(f"no tensor dump under {path!r} (no model.json): was the program "
                                f"run with enable_dump=True and dump_path={path!r}?")
    if process is not None:
        dirs = [d for d in dirs if os.path.basename(d) == process]
        if not dirs:
            raise FileNotFoundError(f"no process directory {process!r} under {path!r}")
    directory = dirs[-1]
    models = []
    for model_json in sorted(glob.glob(os.path.join(directory, "*", "model.json"))):
        with open(model_json) as f:
            info = json.load(f)
        try:
            metadata = json.loads(info.get("metadata") or "{}")
        except ValueError:
            metadata = {}
        origins = metadata.get("origins") or [None] * len(info["values"])
        model_dir = os.path.dirname(model_json)
        models.append(ModelDump(info["name"], info["uid"], info["device"], model_dir, origins,
                                info["kernels"], _read_steps(model_dir, "", origins),
                                _read_steps(model_dir, "overflow", origins)))
    return Dump(directory, models)


# --- recomputing on the CPU ------------------------------------------------------------------
def _tensor_name(ref):
    name, _, index = ref.rpartition(":")
    return ref if name and index.isdigit() else f"{ref}:0"


class _CpuGraph:
    """The traced function as a TF1 graph on the CPU, without control edges (values only)."""

    def __init__(self, fn, args):
        import tensorflow as tf
        if not hasattr(fn, "get_concrete_function"):
            fn = tf.function(fn)
        with tf.device("/CPU:0"):
            concrete = fn.get_concrete_function(*args) if args is not None else \
                fn.get_concrete_function()
        gdef = concrete.graph.as_graph_def()
        for node in gdef.node:
            node.device = "/device:CPU:0"
            kept = [i for i in node.input if not i.startswith("^")]
            del node.input[:]
            node.input.extend(kept)
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(gdef, name="")
        # Inside the NPU's graph a function argument is an _Arg named after the FunctionDef's
        # input (e.g. "conv2d_filter"); in the traced graph it is a placeholder ("Conv2D/filter").
        self.aliases = {}
        for arg, t in zip(concrete.function_def.signature.input_arg, concrete.graph.inputs):
            self.aliases[f"{arg.name}:0"] = t.name
        self.session = tf.compat.v1.Session(graph=self.graph)

    def find(self, ref):
        """The graph's tensor name for a TF tensor name of the NPU graph, or None."""
        names = self.feed_names(ref)
        return names[0] if names else None

    def feed_names(self, ref):
        """The graph's tensors that hold the value of TF tensor `ref` of the NPU graph: itself,
        or for a variable's handle (a cluster that reads the variable itself has it as an
        input, and the dump its value) every read of it."""
        name = self.aliases.get(_tensor_name(ref), _tensor_name(ref))
        try:
            t = self.graph.get_tensor_by_name(name)
        except (KeyError, ValueError):
            return []
        if t.dtype.name == "resource":
            return [c.outputs[0].name for c in t.consumers() if c.type == "ReadVariableOp"]
        return [name]

    def unfed_source(self, name, fed, memo):
        """A placeholder that tensor `name` depends on and `fed` does not feed, or None when it
        is computable from the feeds. `memo` caches answers for one set of feeds."""
        stack, visiting = [(name, False)], set()
        while stack:
            t, expanded = stack.pop()
            if t in memo:
                continue
            if t in fed:
                memo[t] = None
                continue
            op = self.graph.get_tensor_by_name(t).op
            if op.type == "Placeholder":
                memo[t] = op.name
                continue
            inputs = [i.name for i in op.inputs]
            if not expanded:
                if t in visiting:      # a loop back edge: decided where the loop entered
                    continue
                visiting.add(t)
                stack.append((t, True))
                stack.extend((i, False) for i in inputs if i not in memo)
            else:
                memo[t] = next((memo[i] for i in inputs if memo.get(i)), None)
        return memo.get(name)

    def run(self, fetches, feeds):
        """{name: array} of the fetches that computed; {name: error} of those that did not."""
        values, errors = {}, {}
        if not fetches:
            return values, errors
        try:
            for name, v in zip(fetches, self.session.run(fetches, feeds)):
                values[name] = v
        except Exception:  # noqa: BLE001  (find the failing fetches one by one)
            for name in fetches:
                try:
                    values[name] = self.session.run(name, feeds)
                except Exception as e:  # noqa: BLE001
                    errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        return values, errors


# --- comparing --------------------------------------------------------------------------------
def metrics(npu, cpu):
    """Errors of `npu` against the reference `cpu` (same shape), in float64."""
    a = np.asarray(npu, np.float64).reshape(-1)
    b = np.asarray(cpu, np.float64).reshape(-1)
    finite = np.isfinite(a) & np.isfinite(b)
    same_special = (~np.isfinite(a) & ~np.isfinite(b)) & ((a == b) | (np.isnan(a) & np.isnan(b)))
    mismatched = int(np.count_nonzero(~finite & ~same_special))
    diff = np.abs(a[finite] - b[finite])
    max_abs = float(diff.max()) if diff.size else 0.0
    if mismatched:
        max_abs = math.inf
    scale = float(np.abs(b[finite]).max()) if diff.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    na, nb = np.linalg.norm(a[finite]), np.linalg.norm(b[finite])
    cosine = 1.0 if na == 0 and nb == 0 else (float(np.dot(a[finite], b[finite]) / (na * nb))
                                              if na > 0 and nb > 0 else 0.0)
    cosine = min(1.0, max(-1.0, cosine))   # rounding can step past 1
    return {"max_abs": max_abs, "max_rel": max_rel, "mean_abs": float(diff.mean()) if diff.size
            else 0.0, "cosine": cosine, "nonfinite_mismatches": mismatched}


@dataclasses.dataclass
class Comparison:
    dump: str
    rows: list          # dicts, worst first
    skipped: list       # dicts: what could not be compared and why
    sort: str = "max_rel"

    def to_json(self):
        return {"dump": self.dump, "sort": self.sort, "rows": self.rows, "skipped": self.skipped}

    def table(self, top=20):
        w = min(60, max([len("op (TF node)")] + [len(r["op"]) for r in self.rows[:top]]))
        k = min(24, max([len("kernel")] + [len(r["kernel"]) for r in self.rows[:top]]))
        head = (f"{'#':>3}  {'op (TF node)':{w}} {'kernel':{k}} {'step':>4} {'max_rel':>10} "
                f"{'max_abs':>10} {'cosine':>9}  shape")
        lines = [head, "-" * len(head)]
        for i, r in enumerate(self.rows[:top]):
            lines.append(f"{i + 1:>3}  {r['op'][:w]:{w}} {r['kernel'][:k]:{k}} {r['step']:>4} "
                         f"{r['max_rel']:>10.3g} {r['max_abs']:>10.3g} {r['cosine']:>9.6f}  "
                         f"{r['shape']}")
        more = len(self.rows) - top
        lines.append(f"{len(self.rows)} tensor(s) compared" + (f", {more} more not shown"
                                                             if more > 0 else "")
                     + (f"; {len(self.skipped)} could not be compared (see --json)"
                        if self.skipped else ""))
        return "\n".join(lines)


def compare(dump_path, fn, args=None, step=None, model=None, sort="max_rel", process=None):
    """Recomputes every dumped tensor of `fn` on the CPU and ranks them by error (see the module
    docstring). `args`: example arguments to trace `fn` with (None: its input_signature)."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort {sort!r} is not one of {', '.join(SORT_KEYS)}")
    dump = load_dump(dump_path, process)
    if args is None and not getattr(fn, "input_signature", None):
        args = _specs_from_dump(fn, dump)
    cpu = _CpuGraph(fn, args)
    rows, skipped = [], []
    for m in dump.models:
        if model is not None and model not in (m.name, f"{m.name}.{m.uid}"):
            continue
        for s, tensors in sorted(m.steps.items()):
            if step is not None and s != step:
                continue
            feeds, memo = {}, {}
            for t in tensors:
                if t.kind == "model_input" and t.tf_tensor and t.path:
                    for name in cpu.feed_names(t.tf_tensor):
                        feeds[name] = t.load()
            wanted = {}
            for t in tensors:
                why = None
                if t.path is None:
                    why = "not written (see the manifest's 'skipped')"
                elif t.tf_tensor is None:
                    why = "holds no TF tensor (an engine-internal value)"
                elif t.kind == "model_input":
                    continue
                else:
                    name = cpu.find(t.tf_tensor)
                    if name is None:
                        why = f"TF tensor {t.tf_tensor} is not in the function's graph"
                    elif name not in feeds:
                        source = cpu.unfed_source(name, feeds, memo)
                        if source is not None:
                            why = f"needs {source!r}, which no dumped model input feeds"
                if why:
                    skipped.append(_describe(t, why))
                else:
                    wanted.setdefault(cpu.find(t.tf_tensor), []).append(t)
            values, errors = cpu.run([n for n in wanted if n not in feeds], feeds)
            values.update({n: feeds[n] for n in wanted if n in feeds})
            best = {}
            for name, ts in wanted.items():
                for t in ts:
                    if name in errors:
                        skipped.append(_describe(t, f"TF on CPU failed: {errors[name]}"))
                        continue
                    ref = np.asarray(values[name])
                    npu = t.load()
                    if tuple(ref.shape) != tuple(npu.shape):
                        skipped.append(_describe(t, f"shape {tuple(npu.shape)} differs from TF's "
                                                    f"{tuple(ref.shape)}"))
                        continue
                    row = dict(_describe(t), **metrics(npu, ref))
                    key = (m.uid, s, t.tf_tensor)
                    # One row per TF tensor: the worst of the kernels that held it.
                    if key not in best or _worse(row, best[key], sort):
                        row["also"] = best[key]["also"] + [best[key]["file"]] if key in best else []
                        best[key] = row
                    else:
                        best[key]["also"].append(row["file"])
            rows.extend(best.values())
    rows.sort(key=lambda r: _sort_key(r, sort))
    return Comparison(dump.directory, rows, skipped, sort)


def _specs_from_dump(fn, dump):
    """TensorSpecs for `fn`'s arguments from the dumped model inputs they fed (inside the NPU
    graph a function argument `x` is the tensor "x:0")."""
    import inspect
    import tensorflow as tf
    target = getattr(fn, "python_function", None) or getattr(fn, "call", None) or fn
    params = [p for p in inspect.signature(target).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    fed = {t.tf_tensor: t for t in dump.tensors() if t.kind == "model_input" and t.tf_tensor}
    specs = []
    for p in params:
        t = fed.get(f"{p.name}:0")
        if t is None:
            raise ValueError(f"cannot tell the shape of argument {p.name!r} of the function from "
                             f"the dump (no NPU cluster read it directly): give example arguments "
                             f"(an `inputs()` function in the script, --inputs NAME, or an "
                             f"input_signature)")
        specs.append(tf.TensorSpec(t.shape, tf.dtypes.as_dtype(t.dtype), name=p.name))
    return specs


def _describe(t, why=None):
    d = {"op": (t.tf_tensor or "").rpartition(":")[0] or t.node, "tensor": t.tf_tensor,
         "model": t.model, "model_uid": t.model_uid, "step": t.step, "node": t.node,
         "kernel": t.kernel or "(model input)", "kernel_index": t.kernel_index, "kind": t.kind,
         "index": t.index,
         "dtype": t.dtype, "format": t.format, "shape": list(t.shape),
         "file": t.path and os.path.basename(t.path)}
    if why:
        d["reason"] = why
    return d


def _sort_key(row, sort):
    if sort == "cosine":
        return (row["cosine"], -row["max_rel"])
    return (-row[sort], row["cosine"])


def _worse(a, b, sort):
    return _sort_key(a, sort) < _sort_key(b, sort)


# --- command line ------------------------------------------------------------------------------
def _load_callable(args):
    if args.module:
        module_name, sep, attr = args.module.partition(":")
        if not sep or not attr:
            raise SystemExit(f"--module must be 'package.module:function', got {args.module!r}")
        module = importlib.import_module(module_name)
        fn_name = attr
    else:
        path = os.path.abspath(args.script)
        if not os.path.isfile(path):
            raise SystemExit(f"--script {args.script!r} is not a file")
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location("_compare_dump_script", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn_name = args.function
        if not fn_name:
            raise SystemExit("--script needs --function NAME")
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise SystemExit(f"{fn_name!r} is not a function of {module.__name__}")
    inputs_name = args.inputs or ("inputs" if hasattr(module, "inputs") else None)
    example = None
    if inputs_name:
        make = getattr(module, inputs_name, None)
        if make is None or not callable(make):
            raise SystemExit(f"--inputs {inputs_name!r} is not a function of the script")
        example = make()
        example = list(example) if isinstance(example, (list, tuple)) else [example]
    return fn, example


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m npu_device.tools.compare_dump",
                                description="Rank the ops of an NPU tensor dump by their error "
                                            "against TensorFlow on the CPU.")
    p.add_argument("dump", help="the dump_path (or one process's or model's directory in it)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--script", help="Python file that defines the function")
    src.add_argument("--module", help="package.module:function instead of --script")
    p.add_argument("--function", help="the function's name in --script")
    p.add_argument("--inputs", help="function in the script returning example arguments "
                                    "(default: `inputs` if defined)")
    p.add_argument("--step", type=int, help="compare this step only (default: every dumped step)")
    p.add_argument("--model", help="compare this model only (name, or name.uid)")
    p.add_argument("--process", help="process directory to read when several processes dumped")
    p.add_argument("--sort", choices=SORT_KEYS, default="max_rel",
                   help="ranking: max_rel/max_abs largest first, cosine smallest first")
    p.add_argument("--top", type=int, default=20, help="rows to print (default 20)")
    p.add_argument("--json", help="write every row and every skipped tensor to this file")
    args = p.parse_args(argv)
    fn, example = _load_callable(args)
    try:
        result = compare(args.dump, fn, example, step=args.step, model=args.model,
                         sort=args.sort, process=args.process)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"compare_dump: {e}") from None
    print(f"dump: {result.dump}")
    print(result.table(args.top))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_json(), f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
