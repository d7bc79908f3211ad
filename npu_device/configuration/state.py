"""The process's option values: NPU_* environment defaults, overridden by set_npu_config(), checked
as a whole, pushed to the native runtime where they size devices, and read as immutable
snapshots. The layers above (the plugin bridge, precision) apply the options that concern them
through on_change(); nothing here imports them."""
import copy
import hashlib
import json
import logging
import os
import threading
import types
from collections.abc import Mapping

from npu_device.configuration import options as opt

PRECISION_PAIR = ("precision_mode", "precision_mode_v2")
RUNTIME_OPTIONS = {"device_count": "device_count", "hbm_size": "hbm_bytes"}  # -> _C.get_config key
COMPILE_OPTIONS = {o.name for o in opt.OPTIONS if o.compile} | {"precision"}


def _native():
    try:
        from npu_device import _C
    except ImportError as e:
        raise ImportError(f"npu_device's native bridge npu_device._C is not built ({e}); build "
                          "the `_C` CMake target") from e
    return _C


class Snapshot(Mapping):
    """The effective options at one moment, read-only: `snap.precision_mode` or `snap["..."]`.

    Extra attributes: `precision`, the canonical precision mode the graph engine implements
    (aliases and precision_mode_v2 resolved; see options.CANONICAL_PRECISION), and
    `fingerprint`, a short stable hash of everything that changes a compiled graph (precision,
    modify_mixlist, deterministic, graph_memory_max_size), for compile-cache keys.
    """
    __slots__ = ("_values", "_json", "precision", "fingerprint")

    def __init__(self, values):
        precision = opt.CANONICAL_PRECISION[values["precision_mode_v2"] or values["precision_mode"]]
        compile_values = {o.name: values[o.name] for o in opt.OPTIONS
                          if o.compile and o.name not in PRECISION_PAIR}
        compile_values["precision"] = precision
        digest = hashlib.sha256(json.dumps(compile_values, sort_keys=True).encode()).hexdigest()
        object.__setattr__(self, "_values", types.MappingProxyType(
            {k: _freeze(v) for k, v in values.items()}))
        object.__setattr__(self, "_json", json.dumps({**values, "precision": precision}))
        object.__setattr__(self, "precision", precision)
        object.__setattr__(self, "fingerprint", digest[:16])

    def to_dict(self):
        """A plain, JSON-able copy: every option plus "precision" (the canonical mode)."""
        return json.loads(self._json)

    def compile_options(self):
        """The options the graph engine compiles with (graph_engine/compiler/options.py): those
        marked `compile` plus "precision", as a plain dict in name order."""
        values = self.to_dict()
        return {name: values[name] for name in sorted(COMPILE_OPTIONS)}

    def __getitem__(self, name):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __getattr__(self, name):
        return self._values[opt.lookup(name).name]  # unknown: UnknownOptionError, suggesting

    def __setattr__(self, name, value):
        raise AttributeError("a configuration snapshot is read-only; use "
                             "npu_device.set_npu_config() to change options")

    def __repr__(self):
        return f"Snapshot({dict(self._values)!r}, fingerprint={self.fingerprint!r})"


def _freeze(value):
    if isinstance(value, dict):
        return types.MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(value)
    return value


class Config:
    """Option state. One instance (CONFIG) serves the process; tests may make their own with a
    fake `environ`. Setting is all-or-nothing: a call that fails changes nothing."""

    def __init__(self, environ=None):
        self._live = environ is None   # the process's options: pushed to the native runtime
        self._environ = os.environ if environ is None else environ
        self._python = {}   # canonical values set from Python (never None: None unsets)
        self._env = None    # canonical values from NPU_* variables, read once
        self._ignored = {}  # Ascend options without effect here (options.ASCEND_NO_EFFECT)
        self._lock = threading.RLock()
        self._snapshot = None

    # --- reading -------------------------------------------------------------------------------
    def _env_values(self):
        if self._env is None:
            env = {}
            for o in opt.OPTIONS:
                raw = self._environ.get(o.env, "").strip()
                if raw:
                    env[o.name] = opt.parse(o, raw, source=o.env)
            if all(name in env for name in PRECISION_PAIR):
                raise ValueError("NPU_PRECISION_MODE and NPU_PRECISION_MODE_V2 are mutually "
                                 "exclusive; set only one of them")
            _validate(_resolve(env), "in the environment (NPU_* variables)")
            self._env = env
        return self._env

    def _requested(self, python):
        env = self._env_values()
        if any(name in python for name in PRECISION_PAIR):
            # The program chose a precision: the environment's choice of either name yields.
            env = {k: v for k, v in env.items() if k not in PRECISION_PAIR}
        return _resolve({**env, **python})

    def values(self):
        """The effective value of every option (device sizes as the runtime really has them)."""
        with self._lock:
            values = self._requested(self._python)
        native = _runtime_config()
        if native is not None:
            values.update({name: native[key] for name, key in RUNTIME_OPTIONS.items()})
        return values

    def snapshot(self):
        with self._lock:
            initialized = _runtime_config() is not None
            if self._snapshot is None or self._snapshot[0] != initialized:
                self._snapshot = (initialized, Snapshot(self.values()))
            return self._snapshot[1]

    # --- writing -------------------------------------------------------------------------------
    def ignored(self, name):
        """The value last given for an Ascend option that has no effect here (None if none)."""
        with self._lock:
            return self._ignored.get(name)

    def set(self, **kwargs):
        parsed, ignored = {}, {}
        for name, value in kwargs.items():
            if name in opt.ASCEND_NO_EFFECT and name not in opt.BY_NAME:
                ignored[name] = value
            else:
                parsed[name] = opt.parse(opt.lookup(name), value)
        with self._lock:
            python = dict(self._python)
            for name, value in parsed.items():
                if value is None:
                    python.pop(name, None)
                else:
                    python[name] = value
            _check_precision_pair(python, parsed)
            requested = self._requested(python)
            _validate(requested, "")
            changed = [name for name in parsed if name in RUNTIME_OPTIONS]
            if changed:
                self._push_to_runtime(requested, changed)
            self._python = python
            self._snapshot = None
            for name, value in ignored.items():
                _warn_no_effect(name)
                self._ignored[name] = value
            _apply_side_effects(requested, self._live)

    def apply_environment(self):
        """Reads and checks the NPU_* variables and hands the device sizes to the runtime if it
        has not started yet (called at import, before TensorFlow creates devices)."""
        with self._lock:
            requested = self._requested(self._python)
            self._push_to_runtime(requested, [], check_only=True)
            _apply_side_effects(requested, self._live)

    def _push_to_runtime(self, requested, changed, check_only=False):
        C = _native()
        native = _runtime_config()
        if native is None:
            C.configure(requested["device_count"], requested["hbm_size"])
            _refresh_tensorflow_devices(requested["device_count"])
            return
        for name in changed:
            actual = native[RUNTIME_OPTIONS[name]]
            if requested[name] != actual:
                raise RuntimeError(
                    f"npu_device option {name!r} cannot take effect any more: the NPU devices "
                    f"already exist with {name}={actual}. Set {opt.BY_NAME[name].env} in the "
                    f"environment before the program starts, or call set_npu_config({name}=...) "
                    f"right after `import npu_device`, before the first TensorFlow op")
        if check_only:
            for name, key in RUNTIME_OPTIONS.items():
                if requested[name] != native[key]:
                    logging.getLogger("npu_device").warning(
                        "the NPU devices were created before npu_device read %s: they have "
                        "%s=%s, the environment asks for %s", opt.BY_NAME[name].env, name,
                        native[key], requested[name])


_DEFAULTS = {o.name: opt.parse(o, o.default) for o in opt.OPTIONS}  # e.g. "~" expanded


def _resolve(explicit):
    values = dict(_DEFAULTS)
    values.update(explicit)
    if values["precision_mode_v2"] is not None and "precision_mode" not in explicit:
        values["precision_mode"] = None  # the default precision_mode yields to an explicit v2
    return values


def _check_precision_pair(python, parsed):
    if not all(name in python for name in PRECISION_PAIR):
        return
    if all(name in parsed for name in PRECISION_PAIR):
        raise ValueError("precision_mode and precision_mode_v2 are mutually exclusive; set only "
                         "one of them")
    new = next(name for name in PRECISION_PAIR if name in parsed)
    old = next(name for name in PRECISION_PAIR if name != new)
    raise ValueError(f"precision_mode and precision_mode_v2 are mutually exclusive: {old} is "
                     f"already {python[old]!r}. To switch, pass {old}=None in the same call: "
                     f"set_npu_config({new}=..., {old}=None)")


def _validate(values, where):
    """Rules that involve more than one option."""
    where = f" {where}" if where else ""
    precision = opt.CANONICAL_PRECISION[values["precision_mode_v2"] or values["precision_mode"]]
    if values["modify_mixlist"] is not None and precision not in opt.MIXED_MODES:
        raise ValueError(
            f"modify_mixlist{where} is only valid with a mixed precision mode (precision_mode "
            f"allow_mix_precision, allow_mix_precision_fp16 or allow_mix_precision_bf16, or "
            f"precision_mode_v2 mixed_float16 or mixed_bfloat16); the precision mode is "
            f"{values['precision_mode_v2'] or values['precision_mode']!r}")
    for flag, directory in (("enable_dump", "dump_path"), ("enable_profiling", "profiling_dir")):
        if values[flag] and values[directory] is None:
            raise ValueError(f"{flag}=True{where} needs {directory} (environment variable "
                             f"{opt.BY_NAME[directory].env}) to say where to write")
        problem = _unwritable_directory(values[directory]) if values[flag] else None
        if problem:
            raise ValueError(f"{directory}={values[directory]!r}{where} cannot be used with "
                             f"{flag}=True: {problem}")
    native = _runtime_config()
    count = native["device_count"] if native is not None else values["device_count"]
    if values["device_id"] >= count:
        raise ValueError(
            f"device_id = {values['device_id']}{where} is out of range: with device_count = "
            f"{count} the allowed device ids are 0 to {count - 1} (more devices: option "
            f"device_count / {opt.BY_NAME['device_count'].env}, before the devices exist)")
    hbm = native["hbm_bytes"] if native is not None else values["hbm_size"]
    limits = {n: values[n] for n in ("graph_memory_max_size", "variable_memory_max_size")
              if values[n] is not None}
    if sum(limits.values()) > hbm:
        raise ValueError(f"{' + '.join(limits)}{where} = {sum(limits.values())} bytes exceeds "
                         f"the device memory hbm_size = {hbm} bytes")


def _unwritable_directory(path):
    """Why `path` cannot hold dumps or profiles (it is created when missing), or None."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        if not os.path.isdir(path):
            return "it exists and is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else "the directory is not writable"
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"it does not exist and {parent!r} does not let it be created"
    return None


def _runtime_config():
    """The device configuration once it can no longer change, else None. It is fixed when the
    native runtime initializes or when TensorFlow creates its devices (eager context init),
    whichever comes first."""
    try:
        C = _native()
    except ImportError:
        return None  # pure-Python use (docs generation): requested values are the effective ones
    if C.is_initialized() or _tensorflow_devices_created():
        return C.get_config()
    return None


def _tensorflow_devices_created():
    from tensorflow.python.eager import context
    return context.context()._initialized  # pylint: disable=protected-access


def _refresh_tensorflow_devices(device_count):
    """TensorFlow lists physical devices when the plugin loads; list them again if device_count
    changed since, so tf.config.list_physical_devices("NPU") agrees. (Relisting resets
    tf.config.set_visible_devices, so it is done only when needed.)"""
    from tensorflow.python.eager import context
    ctx = context.context()
    if _native().plugin_registered() and len(ctx.list_physical_devices("NPU")) != device_count:
        ctx.reinitialize_physical_devices()


def _apply_side_effects(values, live):
    logging.getLogger("npu_device").setLevel(values["log_level"].upper())
    if live:
        _push_runtime_settings(values)


def _push_runtime_settings(values):
    """Hands the native runtime the option its device memory reads itself,
    variable_memory_max_size (the plugin's options, overflow_mode and the dump and profiling
    options are applied by their modules' on_change listeners)."""
    try:
        C = _native()
    except ImportError:
        return  # pure-Python use (docs generation): there is no runtime to configure
    C.set_variable_memory_limit(values["variable_memory_max_size"] or 0)


_warned_no_effect = set()


def _warn_no_effect(name):
    """Once per process and name: an Ascend option was given that means nothing here."""
    if name in _warned_no_effect:
        return
    _warned_no_effect.add(name)
    logging.getLogger("npu_device").warning(
        "npu_device option %r has no effect on this backend and is ignored: %s", name,
        opt.ASCEND_NO_EFFECT[name])


CONFIG = Config()


def get_npu_config():
    """Effective value of every option, as a dict (a copy: changing it changes nothing)."""
    return copy.deepcopy(CONFIG.values())


def set_npu_config(**options):
    """Sets options, e.g. set_npu_config(precision_mode="allow_mix_precision").

    Validates everything first and changes nothing if any value is wrong: an unknown name raises
    TypeError (naming the valid ones), a bad value ValueError (naming the allowed ones), and an
    option that can no longer take effect (device_count, hbm_size once the runtime is
    initialized) RuntimeError. None resets an option to its environment or built-in default.
    """
    before = CONFIG.snapshot().fingerprint
    CONFIG.set(**options)
    snapshot = CONFIG.snapshot()
    failure = None
    for listener in list(_listeners):
        try:  # every listener runs: one that fails must not leave the others' settings stale
            listener(snapshot, snapshot.fingerprint != before)
        except Exception as e:  # noqa: BLE001  (raised below, after the others ran)
            failure = failure or e
    if failure is not None:
        raise failure


_listeners = []


def on_change(listener):
    """Calls listener(snapshot, compile_changed) now and after every set_npu_config;
    compile_changed says whether options that change compiled graphs changed (the Snapshot
    fingerprint). How npu_device.compiler_bridge and npu_device.precision apply their options
    without the configuration importing them."""
    _listeners.append(listener)
    listener(current(), False)


def current():
    """Immutable Snapshot of the effective options (cached until something changes); the
    bridge computes the compile options from it (Snapshot.compile_options)."""
    return CONFIG.snapshot()


class GlobalOptions:
    """Attribute-style access to the same options: global_options().precision_mode = "..."."""

    def __getattr__(self, name):
        if name in opt.ASCEND_NO_EFFECT and name not in opt.BY_NAME:
            return CONFIG.ignored(name)
        return get_npu_config()[opt.lookup(name).name]

    def __setattr__(self, name, value):
        set_npu_config(**{name: value})

    def __dir__(self):
        return list(opt.BY_NAME)

    def __repr__(self):
        return f"GlobalOptions({get_npu_config()!r})"


_GLOBAL_OPTIONS = GlobalOptions()


def global_options():
    return _GLOBAL_OPTIONS
