"""Per-pass switches: the `fusion_switch_file` compile option (in the spirit of Ascend's
fusion_switch_file). A JSON object maps pass names to "on"/"off"; the key "ALL" sets every
optional pass at once and named entries override it:

    {"ALL": "off", "eliminate_common_subexpressions": "on"}

Ascend's nesting {"Switch": {"GraphFusion": {...}, "UBFusion": {...}}} is accepted too and
flattened. The switchable passes are those in pipeline.PASSES minus pipeline.REQUIRED, so passes
added to the pipeline later are switchable without changes here. Boolean compile options can
switch passes off too (OPTION_SWITCHES).

The rules live in pass_manager.py, below the pipeline that applies them; this module is their
entry point for option parsing (npu_device's configuration, tools, tests).
"""
from graph_engine.compiler import pipeline
from graph_engine.compiler.pass_manager import (  # noqa: F401  (the rules, re-exported)
    ALL, OPTION_SWITCHES, VALUES, enabled)


def load(value):
    """The normalised switches {name: "on"|"off"} from a path, JSON text or dict; ValueError
    naming the source, the problem and the allowed names/values."""
    return pipeline.load_switches(value)
