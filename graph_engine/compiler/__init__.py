"""GE compiler: TF graphs -> compiled NPU models (docs/compiled_model_format.md).

Entry points (graph_engine.compiler.api): partition_graph(graphdef_bytes) and
compile_model(nodedef_bytes). See README.md in this folder for the layout.
"""
