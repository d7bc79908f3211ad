"""The optimizer updates of resource variables (tf_plugin_cc/training_ops.cc): ResourceApply* on
a whole variable and ResourceSparseApply* on the rows of an IndexedSlices gradient. Each case
compares the variable and every slot after one update; accumulators that the update takes a
square root of are positive, and the sparse cases repeat an index (applied in order)."""
import numpy as np

from npu_device.tools.op_cases import Var, _f32

_SHAPE = (3, 4)
_ROWS = (5, 3)
_IDX = np.array([3, 0, 3], np.int32)


def _s(x):
    return np.float32(x)


def _vars(*names, shape=_SHAPE, positive=()):
    """Var inputs: `var` and its slots, the ones in `positive` strictly positive."""
    return {n: Var(_f32(*shape, lo=0.5, hi=2.0) if n in positive else _f32(*shape, lo=-1.0, hi=1.0))
            for n in names}


def _dense(op, slots, scalars, attrs=None, positive=()):
    return (op, {**_vars("var", *slots, positive=positive), **scalars, "grad": _f32(*_SHAPE)},
            attrs or {})


def _sparse(op, slots, scalars, attrs=None, positive=(), indices=_IDX):
    return (op, {**_vars("var", *slots, shape=_ROWS, positive=positive), **scalars,
                 "grad": _f32(len(indices), _ROWS[1]), "indices": indices}, attrs or {})


_ADAM = {"beta1_power": _s(0.9 ** 3), "beta2_power": _s(0.999 ** 3), "lr": _s(0.1),
         "beta1": _s(0.9), "beta2": _s(0.999), "epsilon": _s(1e-3)}
_RMS = {"lr": _s(0.05), "rho": _s(0.9), "momentum": _s(0.5), "epsilon": _s(1e-3)}
_FTRL = {"lr": _s(0.5), "l1": _s(0.1), "l2": _s(0.2)}
_PROX = {"lr": _s(0.3), "l1": _s(0.1), "l2": _s(0.2)}
_DA = {"lr": _s(0.2), "l1": _s(0.05), "l2": _s(0.1), "global_step": np.int64(4)}
_DA_SLOTS = ("gradient_accumulator", "gradient_squared_accumulator")

CASES = [
    ("ResourceApplyGradientDescent", {"var": Var(_f32(*_SHAPE)), "alpha": _s(0.25), "delta": _f32(*_SHAPE)}, {}),
    ("ResourceApplyProximalGradientDescent",
     {"var": Var(_f32(*_SHAPE)), "alpha": _s(0.3), "l1": _s(0.1), "l2": _s(0.2), "delta": _f32(*_SHAPE)}, {}),
    ("ResourceApplyProximalGradientDescent",
     {"var": Var(_f32(*_SHAPE)), "alpha": _s(0.3), "l1": _s(0.0), "l2": _s(0.2), "delta": _f32(*_SHAPE)}, {}),
    *[_dense(op, ("accum",), {"lr": _s(0.1), "momentum": _s(0.9)}, {"use_nesterov": nesterov})
      for op in ("ResourceApplyMomentum", "ResourceApplyKerasMomentum") for nesterov in (False, True)],
    *[_dense("ResourceApplyAdam", ("m", "v"), _ADAM, {"use_nesterov": nesterov}, positive=("v",))
      for nesterov in (False, True)],
    _dense("ResourceApplyAdamWithAmsgrad", ("m", "v", "vhat"), _ADAM, positive=("v", "vhat")),
    _dense("ResourceApplyAdaMax", ("m", "v"), {k: v for k, v in _ADAM.items() if k != "beta2_power"},
           positive=("v",)),
    *[_dense("ResourceApplyAdagrad", ("accum",), {"lr": _s(0.1)}, {"update_slots": update},
             positive=("accum",)) for update in (True, False)],
    _dense("ResourceApplyAdagradV2", ("accum",), {"lr": _s(0.1), "epsilon": _s(1e-3)}, positive=("accum",)),
    ("ResourceApplyAdagradDA", {**_vars("var", *_DA_SLOTS, positive=_DA_SLOTS[1:]), "grad": _f32(*_SHAPE), **_DA},
     {}),
    *[_dense("ResourceApplyProximalAdagrad", ("accum",), {**_PROX, "l1": _s(l1)}, positive=("accum",))
      for l1 in (0.1, 0.0)],
    _dense("ResourceApplyAdadelta", ("accum", "accum_update"), {"lr": _s(0.5), "rho": _s(0.9), "epsilon": _s(1e-3)},
           positive=("accum", "accum_update")),
    _dense("ResourceApplyRMSProp", ("ms", "mom"), _RMS, positive=("ms",)),
    ("ResourceApplyCenteredRMSProp",
     {"var": Var(_f32(*_SHAPE)), "mg": Var(_f32(*_SHAPE, lo=-0.5, hi=0.5)), "ms": Var(_f32(*_SHAPE, lo=1.0, hi=2.0)),
      "mom": Var(_f32(*_SHAPE)), **_RMS, "grad": _f32(*_SHAPE)}, {}),
    *[_dense("ResourceApplyFtrl", ("accum", "linear"), {**_FTRL, "lr_power": _s(power)},
             {"multiply_linear_by_lr": by_lr}, positive=("accum",))
      for power in (-0.5, -0.3) for by_lr in (False, True)],
    *[_dense("ResourceApplyFtrlV2", ("accum", "linear"), {**_FTRL, "l2_shrinkage": _s(0.1), "lr_power": _s(power)},
             {"multiply_linear_by_lr": by_lr}, positive=("accum",))
      for power in (-0.5, -0.3) for by_lr in (False, True)],
    _dense("ResourceApplyAddSign", ("m",), {"lr": _s(0.1), "alpha": _s(1.0), "sign_decay": _s(0.5), "beta": _s(0.9)}),
    _dense("ResourceApplyPowerSign", ("m",),
           {"lr": _s(0.1), "logbase": _s(np.log(2.0)), "sign_decay": _s(0.5), "beta": _s(0.9)}),
    # IndexedSlices gradients
    _sparse("ResourceSparseApplyAdadelta", ("accum", "accum_update"),
            {"lr": _s(0.5), "rho": _s(0.9), "epsilon": _s(1e-3)}, positive=("accum", "accum_update")),
    *[_sparse("ResourceSparseApplyAdagrad", ("accum",), {"lr": _s(0.1)}, {"update_slots": update},
              positive=("accum",)) for update in (True, False)],
    _sparse("ResourceSparseApplyAdagrad", ("accum",), {"lr": _s(0.1)}, positive=("accum",),
            indices=np.array([4, 1], np.int64)),
    _sparse("ResourceSparseApplyAdagradV2", ("accum",), {"lr": _s(0.1), "epsilon": _s(1e-3)}, positive=("accum",)),
    _sparse("ResourceSparseApplyAdagradDA", _DA_SLOTS, _DA, positive=_DA_SLOTS[1:]),
    ("ResourceSparseApplyCenteredRMSProp",
     {"var": Var(_f32(*_ROWS)), "mg": Var(_f32(*_ROWS, lo=-0.5, hi=0.5)), "ms": Var(_f32(*_ROWS, lo=1.0, hi=2.0)),
      "mom": Var(_f32(*_ROWS)), **_RMS, "grad": _f32(len(_IDX), _ROWS[1]), "indices": _IDX}, {}),
    *[_sparse("ResourceSparseApplyFtrl", ("accum", "linear"), {**_FTRL, "lr_power": _s(power)},
              {"multiply_linear_by_lr": by_lr}, positive=("accum",))
      for power in (-0.5, -0.3) for by_lr in (False, True)],
    *[_sparse("ResourceSparseApplyFtrlV2", ("accum", "linear"),
              {**_FTRL, "l2_shrinkage": _s(0.1), "lr_power": _s(power)}, {"multiply_linear_by_lr": by_lr},
              positive=("accum",))
      for power in (-0.5, -0.3) for by_lr in (False, True)],
    *[_sparse(op, ("accum",), {"lr": _s(0.1), "momentum": _s(0.9)}, {"use_nesterov": nesterov})
      for op in ("ResourceSparseApplyMomentum", "ResourceSparseApplyKerasMomentum") for nesterov in (False, True)],
    _sparse("ResourceSparseApplyMomentum", ("accum",), {"lr": _s(0.1), "momentum": _s(0.9)},
            indices=np.array([2, 2, 0], np.int64)),
    *[_sparse("ResourceSparseApplyProximalAdagrad", ("accum",), {**_PROX, "l1": _s(l1)}, positive=("accum",))
      for l1 in (0.1, 0.0)],
    ("ResourceSparseApplyProximalGradientDescent",
     {"var": Var(_f32(*_ROWS)), "alpha": _s(0.3), "l1": _s(0.1), "l2": _s(0.2), "grad": _f32(len(_IDX), _ROWS[1]),
      "indices": _IDX}, {}),
    ("ResourceSparseApplyProximalGradientDescent",
     {"var": Var(_f32(6)), "alpha": _s(0.3), "l1": _s(0.1), "l2": _s(0.2), "grad": _f32(3),
      "indices": np.array([5, 1, 5], np.int32)}, {}),
    _sparse("ResourceSparseApplyRMSProp", ("ms", "mom"), _RMS, positive=("ms",)),
]
