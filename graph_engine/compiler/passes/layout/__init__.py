"""Layout passes (docs/layouts.md): NC1HWC0 activations and FRACTAL_Z filters for the
convolution family, TransData at format boundaries, then as few TransData as possible.

Run in this order (pipeline.py): assign_formats, insert_transdata, absorb_transposes,
sink_transdata, cancel_transdata, fold_transdata, then dead-code elimination.
"""
from graph_engine.compiler.passes.layout import (absorb_transposes, assign_formats,  # noqa: F401
                                                 cancel_transdata, fold_transdata,
                                                 insert_transdata, sink_transdata)
