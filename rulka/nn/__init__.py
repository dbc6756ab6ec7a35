"""Network building blocks shared by the agents: image heads, MLPs, noisy layers, quantile
embedding and dueling heads. Pure torch modules; nothing here reads a config.

The names below come from ``rulka.nn.blocks`` on first use, so importing a torch-free submodule
(``rulka.nn.topology``, which ``rulka config validate`` reads) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rulka.nn.blocks import (
        ClassicConvHead,
        DuelingHead,
        ImpalaCNN,
        NoisyLinear,
        cosine_embedding,
        init_orthogonal,
        make_image_head,
        make_mlp,
    )

__all__ = [
    "ClassicConvHead",
    "DuelingHead",
    "ImpalaCNN",
    "NoisyLinear",
    "cosine_embedding",
    "init_orthogonal",
    "make_image_head",
    "make_mlp",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rulka.nn import blocks

        return getattr(blocks, name)
    raise AttributeError(f"module 'rulka.nn' has no attribute {name!r}")
