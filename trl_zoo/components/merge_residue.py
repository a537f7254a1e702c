"""An in-place update W ← W + Δ undone bit for bit, from a residue of two bits per element kept on W's device.

Floating-point addition is not invertible: W' = fl(W + Δ), then W'' = fl(W' − Δ) may differ from W in its last
bits. The difference is small in W's own units: read as integers (`bits`, the float's bit pattern: for two floats of
one sign and binade, the difference of the patterns is their distance in ulps),

    d = bits(W) − bits(W'')          is −1, 0 or +1 for nearly every element (|Δ| not far above |W|),

so W = bits⁻¹(bits(fl(W' − Δ)) + d) exactly. `merge` stores d + 1 ∈ {0, 1, 2} packed four to a byte (1/8 of a
bf16 weight's bytes, 1/16 of an fp32 one's) and, for the rare elements whose d lies outside {−1, 0, 1}, their flat
index and original bit pattern; `restore` recomputes W' − Δ with the same Δ (the adapter is not changed in between)
and adds d back. Nothing crosses to the host and the residue is freed at the restore.

Tests: tests/test_merged_generation.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_WIDER = {torch.int16: torch.int32, torch.int32: torch.int64, torch.int64: torch.int64}
_SHIFTS = torch.tensor([0, 2, 4, 6], dtype=torch.uint8)
EXCEPTION = 3  # the 2-bit code of an element whose d is outside {−1, 0, +1}


@dataclass
class Residue:
    """What `restore` needs besides Δ: d + 1 packed four codes a byte, and the elements outside {−1, 0, +1}."""

    packed: torch.Tensor  # uint8, ceil(numel / 4)
    exception_index: torch.Tensor  # int64 flat indices
    exception_bits: torch.Tensor  # the original bit patterns there

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.packed, self.exception_index, self.exception_bits))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a floating-point tensor, as signed integers of its width."""
    return tensor.view(_BITS[tensor.element_size()])


def pack(codes: torch.Tensor) -> torch.Tensor:
    """Four 2-bit codes (uint8 values 0–3) a byte, the first in the lowest bits."""
    padded = torch.nn.functional.pad(codes.flatten(), (0, -codes.numel() % 4)).view(-1, 4)
    return (padded << _SHIFTS.to(codes.device)).sum(dim=1, dtype=torch.uint8)


def unpack(packed: torch.Tensor, numel: int) -> torch.Tensor:
    return ((packed.unsqueeze(1) >> _SHIFTS.to(packed.device)) & 3).flatten()[:numel]


@torch.no_grad()
def merge(weight: torch.Tensor, delta: torch.Tensor) -> Residue:
    """W ← fl(W + Δ) in place (Δ of any float dtype, added as `add_` adds it); returns the residue that undoes it."""
    merged = weight.clone().add_(delta)
    wide = _WIDER[_BITS[weight.element_size()]]
    d = bits(weight).to(wide) - bits(merged.clone().sub_(delta)).to(wide)
    outside = d.abs() > 1
    codes = torch.where(outside, EXCEPTION, d + 1).to(torch.uint8)
    exception_index = outside.flatten().nonzero().flatten()
    residue = Residue(pack(codes), exception_index, bits(weight).flatten()[exception_index].clone())
    weight.copy_(merged)
    return residue


@torch.no_grad()
def restore(weight: torch.Tensor, delta: torch.Tensor, residue: Residue) -> None:
    """W ← the weight `merge` was given, bit for bit (Δ must be the one `merge` added)."""
    weight.sub_(delta)
    flat = bits(weight).view(-1)
    d = unpack(residue.packed, flat.numel()).to(flat.dtype) - 1
    flat.add_(d)
    flat[residue.exception_index] = residue.exception_bits
