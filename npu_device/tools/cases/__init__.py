"""Coverage cases by op family, one module each, defining CASES = [(op, tf.raw_ops inputs, attrs)]
in op_cases.py's form (its helpers `_f32`, `_i32`, `Var`, `tf_cpu_op` are theirs to import).
all_cases(): op_cases.CASES, then every family's cases in module-name order."""
import importlib
import pkgutil

from npu_device.tools import op_cases


def all_cases():
    cases = list(op_cases.CASES)
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        cases += importlib.import_module(f"{__name__}.{module}").CASES
    return cases
