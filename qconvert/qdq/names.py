"""Fresh names for what a rewrite adds to an ONNX graph (Q/DQ pairs and their params)."""

from __future__ import annotations

import onnx


def tensor_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name the graph uses: inputs, outputs, initializers, node inputs and outputs."""
    names = {i.name for i in graph.input} | {o.name for o in graph.output}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


class FreshNames:
    """Names none of `taken` has: fresh(hint) gives the hint itself, else hint_1, hint_2, ...,
    and takes it."""

    def __init__(self, taken: set[str]):
        self.taken = taken

    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self.taken:
            name, k = f"{hint}_{k}", k + 1
        self.taken.add(name)
        return name
