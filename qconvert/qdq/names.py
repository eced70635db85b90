"""Fresh names for what a rewrite adds to an ONNX graph (Q/DQ pairs and their params); the names
a graph already uses are loader.onnx_names."""

from __future__ import annotations


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
