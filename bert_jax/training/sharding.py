"""The device mesh and the logical-axis rules: the one place that decides where arrays live.

Model code names axes logically ("embed", "heads", "activation_batch", ...); the rules here
map those names onto three mesh axes:

- ``data``: pure data parallelism (parameters replicated);
- ``fsdp``: data parallelism whose parameters and optimizer state are also sharded
  (ZeRO-3 style, gathered per layer by XLA);
- ``tensor``: Megatron-style model parallelism over heads, the MLP and the vocabulary.

The same code runs on 1 CPU device (a 1x1x1 mesh), 8 virtual CPU devices, a GPU or a TPU
pod slice: only the mesh shape changes. A run config may replace or add rules
(`rules_with_overrides`, as MaxText's ``logical_axis_rules``), and `check_param_sharding`
names any parameter a mesh cannot hold under the rules before anything is allocated. The
vocabulary goes over ``tensor``: BERT's 30522 rows divide by 2 only, so tensor sizes of 4
or 8 need `BertConfig.vocab_pad_multiple` (e.g. 128).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bert_jax.model.param_shapes import path_str

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

    Devices are laid out along the physical topology (`mesh_utils.create_device_mesh`).
    Devices of several slices (multislice TPU: more than one ``slice_index``) get a hybrid
    mesh: ``data`` is split across the slices (data parallelism over the slower network
    between slices), fsdp and tensor stay inside each slice. When no topology-aware layout
    can be built, the devices go in the order given, with one ``warning:`` line.

    Auto axis types keep the flax-linen logical-partitioning style working (jax 0.10's
    ``make_mesh`` defaults to Explicit axes).
    """
    devices = list(jax.devices() if devices is None else devices)
    shape = _resolve_shape(list(shape), len(devices))
    auto = (jax.sharding.AxisType.Auto,) * 3
    return Mesh(device_array(shape, devices), MESH_AXES, axis_types=auto)


def check_batches(mesh: Mesh, batch_sizes: dict[str, int], micro_batches: dict[str, Sequence[int]]) -> None:
    """Every job's batches must split over the mesh's batch axes (data x fsdp), a training
    batch into each of its gradient-accumulation micro-batches too: refused in one line
    naming the key (not later, inside a reshape). `micro_batches`: the accumulation counts a
    key is split into (phase 1 and phase 2 of pre-training may differ); default 1."""
    ways = mesh.shape["data"] * mesh.shape["fsdp"]
    shape = tuple(mesh.devices.shape)
    for key, size in batch_sizes.items():
        for accum in micro_batches.get(key, (1,)):
            if int(size) % (ways * int(accum)):
                split = f"{ways} batch shards (mesh_shape {shape})"
                if int(accum) > 1:
                    split += f" x {accum} micro-batches (gradient accumulation)"
                raise ValueError(f"config.{key}={size} does not split over {split}")


def _resolve_shape(shape: list[int], num_devices: int) -> list[int]:
    """The mesh shape with its ``-1`` entry filled in, checked against the device count."""
    if len(shape) != 3:
        raise ValueError(f"mesh shape must have 3 entries (data, fsdp, tensor), got {shape}")
    if shape.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got {shape}")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        if num_devices % known:
            raise ValueError(f"{num_devices} devices do not divide into mesh {shape}")
        shape[shape.index(-1)] = num_devices // known
    if int(np.prod(shape)) != num_devices:
        raise ValueError(
            f"mesh {dict(zip(MESH_AXES, shape, strict=True))} needs {int(np.prod(shape))} "
            f"devices but {num_devices} are available"
        )
    return shape


def device_array(shape: Sequence[int], devices: Sequence[Any]) -> np.ndarray:
    """`devices` arranged as a (data, fsdp, tensor) array of `shape` (see `make_mesh`)."""
    shape = list(shape)
    slices = sorted({getattr(d, "slice_index", 0) for d in devices})
    if len(slices) > 1:
        return _hybrid_device_array(shape, devices, len(slices))
    try:
        return mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True)
    except Exception as e:
        _warn_naive_order(shape, devices, e)
        return np.asarray(devices).reshape(shape)


def _hybrid_device_array(shape: list[int], devices: Sequence[Any], num_slices: int) -> np.ndarray:
    """Data parallelism across slices: each slice holds ``data / num_slices`` rows of the
    mesh, laid out along its own topology."""
    if shape[0] % num_slices:
        raise ValueError(
            f"mesh_shape {tuple(shape)}: the data axis ({shape[0]}) must be a multiple of the "
            f"{num_slices} slices the devices span (data parallelism runs across slices)"
        )
    ici = [shape[0] // num_slices, shape[1], shape[2]]
    try:
        return mesh_utils.create_hybrid_device_mesh(
            ici, [num_slices, 1, 1], devices=devices, allow_split_physical_axes=True
        )
    except Exception as e:
        _warn_naive_order(shape, devices, e)
        by_slice = sorted(devices, key=lambda d: (d.slice_index, d.id))  # slices stay on data
        return np.asarray(by_slice).reshape(shape)


def _warn_naive_order(shape: list[int], devices: Sequence[Any], error: Exception) -> None:
    if jax.process_index() != 0:
        return
    reason = (str(error).strip().splitlines() or [""])[0]
    reason = f"{type(error).__name__}: {reason[:160]}{'...' if len(reason) > 160 else ''}"
    kind = getattr(devices[0], "device_kind", "device")
    print(
        f"warning: no topology-aware layout for mesh {tuple(shape)} on {len(devices)} {kind} "
        f"devices ({reason}); using them in the order given, so collectives may be slower",
        flush=True,
    )


def logical_sharding(tree: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]] = LOGICAL_AXIS_RULES) -> Any:
    """NamedShardings for a (boxed, abstract or concrete) tree of partitioned variables."""
    specs = nn.get_partition_spec(tree)
    return nn.logical_to_mesh_sharding(specs, mesh, list(rules))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Leading (batch) axis over data x fsdp, everything else replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def _mesh_axes(logical: str, value: Any) -> Any:
    """An override's mesh axes as the rules hold them: None, a name, or a tuple of names.
    A string may list several, comma-separated ("data,fsdp"); "" and "none" are None."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip() for n in names]
    unknown = [n for n in names if n not in MESH_AXES]
    if unknown:
        raise ValueError(
            f"sharding rule {logical!r}: unknown mesh axis {', '.join(map(repr, unknown))} "
            f"(the mesh axes are {', '.join(MESH_AXES)})"
        )
    return names[0] if len(names) == 1 else tuple(names)


def rules_with_overrides(
    overrides: Mapping[str, Any] | Sequence[Sequence[Any]] | None = None,
    rules: Sequence[tuple[str, Any]] = LOGICAL_AXIS_RULES,
) -> tuple[tuple[str, Any], ...]:
    """`rules` with each override's logical name mapped to its mesh axes instead (in
    place), or added at the end if the rules lack it.

    `overrides`: ``{"vocab": None, "kv": "tensor"}`` or pairs ``(("embed", None),)``, as a
    run config's ``sharding_rules`` holds them; mesh axes are None, a name, a tuple of
    names or a comma-separated string. A mesh axis not in `MESH_AXES` raises ValueError
    naming it.
    """
    if overrides is None:
        return tuple(rules)
    items = list(overrides.items()) if isinstance(overrides, Mapping) else list(overrides)
    changes: dict[str, Any] = {}
    for item in items:
        if isinstance(item, str) or len(item) != 2:
            raise ValueError(f"sharding rule override {item!r} is not a (logical name, mesh axes) pair")
        changes[str(item[0])] = _mesh_axes(str(item[0]), item[1])
    out = [(name, changes.pop(name) if name in changes else axes) for name, axes in rules]
    return tuple(out + list(changes.items()))


def _axis_names(axes: Any) -> tuple[str, ...]:
    if axes is None:
        return ()
    return (axes,) if isinstance(axes, str) else tuple(axes)


def check_param_sharding(
    tree: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]] = LOGICAL_AXIS_RULES
) -> None:
    """Raises ValueError (one line) unless every boxed parameter of `tree` (abstract or
    concrete, e.g. ``jax.eval_shape(model.init, ...)``) can be laid out on `mesh`: each of
    its logical axes has a rule, and each dimension divides by the product of the mesh
    axes it is sharded over. The message names the parameter path, the logical axis, the
    dimension and the mesh axes, so a failure is readable before initialisation (where
    JAX would report an `IndivisibleError` on an anonymous array).
    """
    rules = list(rules)
    known = {name for name, _ in rules}
    sizes = dict(mesh.shape)
    mesh_text = ", ".join(f"{a}={n}" for a, n in sizes.items())
    is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_box)[0]:
        if not isinstance(leaf, nn.Partitioned):
            continue
        logical, shape = tuple(leaf.names), tuple(leaf.value.shape)
        where = f"parameter {path_str(path)} {shape}"
        for dim, name in enumerate(logical):
            if name is not None and name not in known:
                raise ValueError(
                    f"{where}: logical axis {name!r} (dimension {dim}, size {shape[dim]}) matches no "
                    f"sharding rule (mesh {mesh_text}); add one, e.g. sharding_rules=(({name!r}, None),)"
                )
        for dim, axes in enumerate(nn.logical_to_mesh_axes(logical, rules)):
            names = _axis_names(axes)
            parts = int(np.prod([sizes[a] for a in names])) if names else 1
            if shape[dim] % parts:
                fix = "vocab_pad_multiple (e.g. 128)" if logical[dim] == "vocab" else "sharding_rules"
                raise ValueError(
                    f"{where}: dimension {dim} (logical axis {logical[dim]!r}, size {shape[dim]}) "
                    f"does not divide over mesh axes {'x'.join(names)} ({parts} devices; mesh "
                    f"{mesh_text}); see {fix}"
                )
