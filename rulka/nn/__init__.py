"""Network building blocks shared by the agents: image heads, MLPs, noisy layers, quantile
embedding and dueling heads. Pure torch modules; nothing here reads a config."""

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
