"""A linear layer that multiplies a few rows through oneDNN's packed copy of its weight (the ``packed`` layout of
`budgetdraft.decoding.layout`): the weight reordered once, at load, into the blocked format oneDNN multiplies a γ = 5
verify's six rows by fastest (``torch.ops.mkldnn``, what inductor's CPU backend runs a frozen linear with), and one
row, a decode step, through MKL's product with the weight stored column-major, the faster there. On the 2-core AMD
EPYC VM the products of the verifier's 30 layers took 31-33 ms for six rows packed against 78-80 column-major and
63-67 row-major, and 37-40 ms for one row column-major against 38-43 packed (bench/README.md, "oneDNN's packed
weights on the CPU").

Inference only: the packed product has no gradient. The module keeps its ``weight`` (column-major, the same values)
for ``state_dict`` and whatever reads it; the packed copy is no parameter, buffer or saved tensor."""

from __future__ import annotations

import torch

ROWS = 6  # the rows the packed format is laid out for: a γ = 5 verify


def available() -> bool:
    """Whether this torch build has oneDNN's packed linear (x86 CPU wheels do)."""
    try:
        ops = torch.ops.mkldnn
        return torch.backends.mkldnn.is_available() and bool(ops._reorder_linear_weight and ops._linear_pointwise)
    except (AttributeError, RuntimeError):
        return False


class PackedLinear(torch.nn.Linear):
    """``linear`` (its weight and bias, shared, not copied) with a packed copy of its weight for products of more
    than one row."""

    def __init__(self, linear: torch.nn.Linear):
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach().contiguous(), ROWS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == x.shape[-1]:  # one row: a decode step
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")
