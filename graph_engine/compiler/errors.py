"""Errors of the graph engine compiler: they name the node, its op and the reason."""


class CompileError(Exception):
    def __init__(self, reason, node=None, op=None):
        self.reason, self.node, self.op = reason, node, op
        where = f"node {node!r} (op {op}): " if node else ""
        super().__init__(where + reason)
