"""Compile-relevant options, read softly from npu_device.configuration.

The graph engine must not import npu_device itself (that loads the TF plugin as a side effect),
so options are taken only when the application already imported npu_device.configuration and
it offers current(); otherwise the compile runs with no options (the graph's own dtypes). Only
options that change a compiled graph are kept (the configuration marks them `compile`), plus
`precision`, the canonical precision mode.
"""
import hashlib
import json
import os
import sys

DEFAULTS = {}


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


def _jsonable(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _compile_option_names():
    """Names of the options that change compiled graphs, or None if the configuration does not
    say (then every option is kept)."""
    declared = getattr(sys.modules.get("npu_device.configuration.options"), "OPTIONS", None)
    if not declared:
        return None
    return {o.name for o in declared if getattr(o, "compile", False)} | {"precision"}


def current() -> dict:
    module = sys.modules.get("npu_device.configuration")
    get = getattr(module, "current", None)
    if get is None:
        return dict(DEFAULTS)
    try:
        opts = get()
        opts = opts.to_dict() if hasattr(opts, "to_dict") else dict(opts)
    except Exception:          # a broken configuration must not break compiles
        return dict(DEFAULTS)
    keep = _compile_option_names()
    return {k: v for k, v in sorted(opts.items())
            if (keep is None or k in keep) and not k.startswith("_") and _jsonable(v)}


def to_json(opts) -> str:
    return json.dumps(opts, sort_keys=True)


def fingerprint(opts) -> str:
    return hashlib.sha256(to_json(opts).encode()).hexdigest()[:16]
