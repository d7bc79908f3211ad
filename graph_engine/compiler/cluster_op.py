"""The op types of the node that replaces a cluster (tf_plugin_cc/graph_op.cc registers both)."""
CLUSTER_OP = "NpuGraphOp"
# A cluster that reads and updates variables (partition/variables_in_place.py): stateful, as TF
# makes every op with resource inputs, so NpuGraphOp itself stays stateless.
STATEFUL_CLUSTER_OP = "NpuStatefulGraphOp"
CLUSTER_OPS = (CLUSTER_OP, STATEFUL_CLUSTER_OP)
