"""GE, the NPU graph engine: a compiler (Python) from TF graphs to compiled models, and a C++
runtime (graph_engine/runtime) that executes them through the npurt device API."""
