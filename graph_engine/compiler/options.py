"""The options a compile runs with: a dict of JSON-able values that the caller passes to
partition_graph() and compile_model() (graph_engine.compiler.api).

The graph engine reads no configuration of its own. npu_device's bridge passes the options its
configuration marks `compile`, plus `precision`, the canonical precision mode
(npu_device.configuration Snapshot.compile_options()); a caller that passes none compiles with
DEFAULTS: the graph's own dtypes, every pass on.
"""
import json
import os

DEFAULTS = {}


def or_defaults(opts):
    """`opts`, or a copy of DEFAULTS when the caller gave none (None)."""
    return dict(DEFAULTS) if opts is None else opts


def read_json(value):
    """(where, parsed JSON) for an option given as a JSON file path, JSON text or an already
    parsed dict (fusion_switch_file, modify_mixlist); ValueError naming the source."""
    if isinstance(value, dict):
        return "the dict", value
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise ValueError(f"{value!r} is neither JSON text nor the path of a JSON file")
    text = str(value).strip()
    where = "JSON text"
    if not text.startswith(("{", "[")):
        where = f"file {text!r}"
        try:
            with open(os.path.expanduser(text)) as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"cannot read {where}: it is neither JSON text nor a readable file "
                             f"({e.strerror or e})") from None
    try:
        return where, json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON ({e})") from None


def to_json(opts) -> str:
    """The canonical text of `opts`: what an NpuGraphOp carries (attr `options`) and what
    cluster and disk cache keys hash."""
    return json.dumps(opts, sort_keys=True)
