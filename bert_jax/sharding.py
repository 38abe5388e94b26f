"""The device mesh and the logical-axis rules: the one place that decides where arrays live.

Model code names axes logically ("embed", "heads", "activation_batch", ...); the rules here
map those names onto three mesh axes:

- ``data``: pure data parallelism (parameters replicated);
- ``fsdp``: data parallelism whose parameters and optimizer state are also sharded
  (ZeRO-3 style, gathered per layer by XLA);
- ``tensor``: Megatron-style model parallelism over heads, the MLP and the vocabulary.

The same code runs on 1 CPU device (a 1x1x1 mesh), 8 virtual CPU devices, a GPU or a TPU
pod slice: only the mesh shape changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# (logical name, mesh axis or axes or None). Batch goes over both data-parallel axes.
LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    # Parameters.
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("dense_out", "tensor"),
    ("position", None),
    ("type_vocab", None),
    ("norm", None),
    ("layers", None),  # the stacked-layer axis of scanned parameters
    ("classes", None),
    # Activations.
    ("activation_batch", ("data", "fsdp")),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", "tensor"),
    ("activation_kv", None),
    ("activation_mlp", "tensor"),
    ("activation_vocab", "tensor"),
)


def make_mesh(shape: Sequence[int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh. A ``-1`` entry takes the remaining devices.

    Auto axis types keep the flax-linen logical-partitioning style working (jax 0.10's
    ``make_mesh`` defaults to Explicit axes).
    """
    devices = list(jax.devices() if devices is None else devices)
    shape = list(shape)
    if len(shape) != 3:
        raise ValueError(f"mesh shape must have 3 entries (data, fsdp, tensor), got {shape}")
    if shape.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got {shape}")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        if len(devices) % known:
            raise ValueError(f"{len(devices)} devices do not divide into mesh {shape}")
        shape[shape.index(-1)] = len(devices) // known
    if int(np.prod(shape)) != len(devices):
        raise ValueError(
            f"mesh {dict(zip(MESH_AXES, shape, strict=True))} needs {int(np.prod(shape))} "
            f"devices but {len(devices)} are available"
        )
    auto = (jax.sharding.AxisType.Auto,) * 3
    try:
        dev_array = mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True)
    except Exception:
        dev_array = np.asarray(devices).reshape(shape)
    return Mesh(dev_array, MESH_AXES, axis_types=auto)


def logical_sharding(tree: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]] = LOGICAL_AXIS_RULES) -> Any:
    """NamedShardings for a (boxed, abstract or concrete) tree of partitioned variables."""
    specs = nn.get_partition_spec(tree)
    return nn.logical_to_mesh_sharding(specs, mesh, list(rules))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Leading (batch) axis over data x fsdp, everything else replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
