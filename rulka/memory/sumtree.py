"""A sum tree over a fixed number of slots with vectorised update and sampling (for PER)."""

from __future__ import annotations

import numpy as np


class SumTree:
    """Non-negative values per slot; ``find(mass)`` maps masses in [0, total) to slots in
    proportion to their value. All operations take arrays and loop over tree levels only."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.size = 1
        while self.size < self.capacity:
            self.size *= 2
        self.tree = np.zeros(2 * self.size, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        return self.tree[self.size + np.asarray(slots, dtype=np.int64)]

    def set(self, slots: np.ndarray, values: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), slots.shape)
        if slots.size == 0:
            return
        if np.any(values < 0) or not np.all(np.isfinite(values)):
            raise ValueError("sum tree values must be finite and non-negative")
        nodes = self.size + slots
        self.tree[nodes] = values  # for duplicate slots the last value wins
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, mass: np.ndarray) -> np.ndarray:
        mass = np.array(mass, dtype=np.float64)
        node = np.ones(mass.shape, dtype=np.int64)
        while node[0] < self.size if node.size else False:
            left = 2 * node
            go_right = mass >= self.tree[left]
            mass = np.where(go_right, mass - self.tree[left], mass)
            node = np.where(go_right, left + 1, left)
        slots = node - self.size
        return np.minimum(slots, self.capacity - 1)

    def values(self) -> np.ndarray:
        return self.tree[self.size:self.size + self.capacity].copy()
