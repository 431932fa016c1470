"""Second-order jets: a quantity with its first and second time derivatives, carried exactly through products,
sums and smooth functions (forward-mode differentiation, float64).

A `Jet` holds v, d1 = dv/dt and d2 = d2v/dt2 of the same shape (time in seconds unless a caller says otherwise).
Rules: (a b)' = a' b + a b', (a b)'' = a'' b + 2 a' b' + a b''; f(a)' = f'(a) a', f(a)'' = f''(a) a'^2 + f'(a) a''.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Jet:
    """v, d1, d2: arrays of one shape (a value and its first two derivatives)."""

    v: np.ndarray
    d1: np.ndarray
    d2: np.ndarray

    @classmethod
    def constant(cls, value) -> "Jet":
        v = np.asarray(value, dtype=np.float64)
        return cls(v, np.zeros_like(v), np.zeros_like(v))

    def __add__(self, other: "Jet") -> "Jet":
        return Jet(self.v + other.v, self.d1 + other.d1, self.d2 + other.d2)

    def __sub__(self, other: "Jet") -> "Jet":
        return Jet(self.v - other.v, self.d1 - other.d1, self.d2 - other.d2)

    def __getitem__(self, key) -> "Jet":
        return Jet(self.v[key], self.d1[key], self.d2[key])

    def scaled(self, factor: float) -> "Jet":
        """The jet of factor * v (factor constant)."""
        return Jet(factor * self.v, factor * self.d1, factor * self.d2)

    def time_scaled(self, rate: float) -> "Jet":
        """Derivatives with respect to s = t / rate turned into derivatives with respect to t (d/dt = rate d/ds)."""
        return Jet(self.v, rate * self.d1, rate * rate * self.d2)


def product(a: Jet, b: Jet, op=np.multiply) -> Jet:
    """The jet of op(a, b) for a bilinear op (elementwise product, matmul, einsum with fixed subscripts)."""
    return Jet(op(a.v, b.v), op(a.d1, b.v) + op(a.v, b.d1), op(a.d2, b.v) + 2 * op(a.d1, b.d1) + op(a.v, b.d2))


def matmul(a: Jet, b: Jet) -> Jet:
    """The jet of a @ b (batched matrices)."""
    return product(a, b, np.matmul)


def apply(f, f1, f2, a: Jet) -> Jet:
    """The jet of f(a) elementwise, given f and its first and second derivatives f1, f2."""
    g1 = f1(a.v)
    return Jet(f(a.v), g1 * a.d1, f2(a.v) * a.d1 * a.d1 + g1 * a.d2)


def sin(a: Jet) -> Jet:
    return apply(np.sin, np.cos, lambda x: -np.sin(x), a)


def cos(a: Jet) -> Jet:
    return apply(np.cos, lambda x: -np.sin(x), lambda x: -np.cos(x), a)


def inverse_sqrt(a: Jet) -> Jet:
    """The jet of a ** -1/2 (a > 0)."""
    return apply(lambda x: x ** -0.5, lambda x: -0.5 * x ** -1.5, lambda x: 0.75 * x ** -2.5, a)


def stack(jets, axis: int = -1) -> Jet:
    """np.stack of the parts of several jets."""
    return Jet(*(np.stack([getattr(j, part) for j in jets], axis) for part in ("v", "d1", "d2")))
