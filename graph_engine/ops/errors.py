"""Errors of the graph engine compiler: they name the node, its op and the reason.

Each class carries the TensorFlow error code (tensorflow/core/protobuf/error_codes.proto) that
the plugin raises, because the code decides what happens next: the user's own invalid input
(InvalidInputError) surfaces as TF's InvalidArgumentError, while anything the engine cannot or
will not compile makes the cluster run on CPU instead (docs/architecture.md, "Fallback")."""

INVALID_ARGUMENT, RESOURCE_EXHAUSTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL = 3, 8, 11, 12, 13


class CompileError(Exception):
    """The engine cannot compile this (a limitation or a bug of ours): the cluster falls back."""
    code = INTERNAL

    def __init__(self, reason, node=None, op=None):
        self.reason, self.node, self.op = reason, node, op
        where = f"node {node!r} (op {op}): " if node else ""
        super().__init__(where + reason)


class UnsupportedError(CompileError):
    """Valid TensorFlow that the NPU does not implement (an op, a dtype, a data-dependent shape)."""
    code = UNIMPLEMENTED


class InvalidInputError(CompileError):
    """The program's own input is invalid (shapes, axes, windows ...), as TF on CPU would say."""
    code = INVALID_ARGUMENT


class OutOfRangeInputError(InvalidInputError):
    """An index or size outside its range where TF raises OutOfRangeError for it."""
    code = OUT_OF_RANGE


class OutOfMemoryError(CompileError):
    """The compiled model would not fit in device memory."""
    code = RESOURCE_EXHAUSTED


def error_code(exc):
    """The TF error code for an exception raised while compiling."""
    return getattr(exc, "code", INTERNAL) if isinstance(exc, CompileError) else INTERNAL
