"""The graph engine's entry points for the TF plugin (called through the Python bridge).

    partition_graph(graphdef_bytes) -> bytes   placed GraphDef -> GraphDef with NpuGraphOp nodes
    compile_model(nodedef_bytes) -> bytes      NpuGraphOp or eager op NodeDef -> compiled model

Both raise CompileError (graph_engine.ops.errors) with a message naming the node, its op
and the reason; the bridge hands that message to TF.
"""
from graph_engine.compiler.compile import compile_model
from graph_engine.ops.errors import CompileError
from graph_engine.compiler.partition import partition_graph

__all__ = ["CompileError", "compile_model", "partition_graph"]
