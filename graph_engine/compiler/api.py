"""The graph engine's entry points, for the TF plugin (through npu_device's bridge) and tests.

    partition_graph(graphdef_bytes, options=None) -> bytes
        placed GraphDef -> GraphDef with NpuGraphOp nodes (each carrying `options` and its
        `cluster_key`)
    partition_graph_with_report(graphdef_bytes, options=None) -> PartitionResult
        the same, plus the PartitionReport and {NpuGraphOp name: cluster key} of the new clusters
    compile_model(nodedef_bytes, options=None) -> bytes
        NpuGraphOp or eager op NodeDef -> compiled model
    compile_model_with_report(nodedef_bytes, options=None) -> CompileResult
        the same, plus its kernel names, arena bytes and metadata

`options` are the compile options (a dict, graph_engine/compiler/options.py); None compiles
with the defaults. A cluster compiles with the options it was partitioned with. All raise
CompileError (graph_engine.ops.errors) with a message naming the node, its op and the reason;
the bridge hands that message to TF.
"""
from graph_engine.compiler.compile import CompileResult, compile_model, compile_model_with_report
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.partition import (
    PartitionResult, partition_graph, partition_graph_with_report)

__all__ = ["CompileError", "CompileResult", "PartitionResult", "compile_model",
           "compile_model_with_report", "partition_graph", "partition_graph_with_report"]
