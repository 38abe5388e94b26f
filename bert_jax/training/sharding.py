"""The device mesh and the logical-axis rules: the one place that decides where arrays live.

Model code names axes logically ("embed", "heads", "activation_batch", ...); the rules here
map those names onto three mesh axes:

- ``data``: pure data parallelism (parameters replicated);
- ``fsdp``: data parallelism whose parameters and optimizer state are also sharded
  (ZeRO-3 style, gathered per layer by XLA);
- ``tensor``: Megatron-style model parallelism over heads, the MLP and the vocabulary.

The same code runs on 1 CPU device (a 1x1x1 mesh), 8 virtual CPU devices, a GPU, a TPU
pod slice or several slices (multislice: data parallelism across slices over the
data-centre network, fsdp and tensor inside each slice): only the mesh shape changes. A
run config may replace or add rules (`rules_with_overrides`, as MaxText's
``logical_axis_rules``), and `check_param_sharding` names any parameter a mesh cannot
hold under the rules before anything is allocated. The vocabulary goes over ``tensor``:
BERT's 30522 rows divide by 2 only, so tensor sizes of 4 or 8 need
`BertConfig.vocab_pad_multiple` (e.g. 128).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bert_jax.model.param_shapes import path_str

MESH_AXES = ("data", "fsdp", "tensor")
# With several slices: how the slices line up on the mesh axes (-1: all of them on data).
DATA_ACROSS_SLICES = (-1, 1, 1)

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


def by_slice_index(device: Any) -> int:
    """A device's slice: its ``slice_index`` (multislice TPU), 0 where it has none."""
    return int(getattr(device, "slice_index", 0) or 0)


def by_process(device: Any) -> int:
    """Each process one "slice": for devices that carry no slice index (CPU, GPU hosts),
    so that data parallelism runs across processes and fsdp/tensor inside each."""
    return int(device.process_index)


def make_mesh(
    shape: Sequence[int],
    devices: Sequence[jax.Device] | None = None,
    *,
    dcn_shape: Sequence[int] = DATA_ACROSS_SLICES,
    slice_of: Callable[[Any], int] = by_slice_index,
) -> Mesh:
    """A (data, fsdp, tensor) mesh. A ``-1`` entry takes the remaining devices.

    Devices are laid out along the physical topology (`mesh_utils.create_device_mesh`).
    Devices of several slices (multislice TPU: more than one ``slice_index``; `slice_of`
    may group them otherwise, e.g. `by_process`) get a hybrid mesh, as MaxText's ICI and
    DCN parallelism: `shape` is then one slice's mesh (its ``-1`` fills a slice) and
    `dcn_shape` how the slices line up, by default all of them along ``data`` (data
    parallelism over the slower network between slices, fsdp and tensor inside each); the
    mesh is the two multiplied. A `shape` without ``-1`` that covers every device is read
    as the whole mesh instead. When no topology-aware layout can be built, the devices go
    in the order given, with one ``warning:`` line.

    Auto axis types keep the flax-linen logical-partitioning style working (jax 0.10's
    ``make_mesh`` defaults to Explicit axes).
    """
    devices = list(jax.devices() if devices is None else devices)
    auto = (jax.sharding.AxisType.Auto,) * 3
    array = device_array(shape, devices, dcn_shape=dcn_shape, slice_of=slice_of)
    return Mesh(array, MESH_AXES, axis_types=auto)


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


def device_array(
    shape: Sequence[int],
    devices: Sequence[Any],
    *,
    dcn_shape: Sequence[int] = DATA_ACROSS_SLICES,
    slice_of: Callable[[Any], int] = by_slice_index,
) -> np.ndarray:
    """`devices` arranged as a (data, fsdp, tensor) array of `shape` (see `make_mesh`)."""
    slices = _group_by_slice(devices, slice_of)
    ici, dcn = _split_shape(list(shape), list(dcn_shape), slices)
    laid_out = [_slice_array(ici, group) for group in slices]
    failed = [error for _, error in laid_out if error is not None]
    if failed:
        _warn_naive_order([i * d for i, d in zip(ici, dcn, strict=True)], devices, failed[0])
    if len(slices) == 1:
        return laid_out[0][0]
    index = np.arange(len(slices)).reshape(dcn)
    blocks = np.vectorize(lambda i: laid_out[i][0], otypes=[object])(index)
    return np.block(blocks.tolist())  # slice blocks side by side along the DCN axes


def _group_by_slice(devices: Sequence[Any], slice_of: Callable[[Any], int]) -> list[list[Any]]:
    """The devices of each slice, slices in order, devices in the order given."""
    groups: dict[int, list[Any]] = {}
    for device in devices:
        groups.setdefault(slice_of(device), []).append(device)
    slices = [groups[key] for key in sorted(groups)]
    sizes = sorted({len(group) for group in slices})
    if len(sizes) > 1:
        counts = ", ".join(str(len(group)) for group in slices)
        raise ValueError(
            f"the devices' {len(slices)} slices differ in size ({counts} devices): no mesh spans them"
        )
    return slices


def _split_shape(
    shape: list[int], dcn_shape: list[int], slices: list[list[Any]]
) -> tuple[list[int], list[int]]:
    """The mesh inside one slice and the mesh of the slices (see `make_mesh`)."""
    n, per = len(slices), len(slices[0])
    try:
        dcn = _resolve_shape(list(dcn_shape), n)
    except ValueError as e:
        raise ValueError(
            f"the mesh across slices {tuple(dcn_shape)} does not fit {n} slice(s): {e}"
        ) from None
    if n == 1:
        return _resolve_shape(shape, per), dcn
    if -1 not in shape and int(np.prod(shape)) == n * per:  # the whole mesh
        for axis, size, ways in zip(MESH_AXES, shape, dcn, strict=True):
            if size % ways:
                raise ValueError(
                    f"mesh_shape {tuple(shape)}: the {axis} axis ({size}) must be a multiple of the {ways} "
                    f"slices the devices span along it (data parallelism runs across slices; a shape "
                    f"with -1 is one slice's mesh)"
                )
        return [size // ways for size, ways in zip(shape, dcn, strict=True)], dcn
    try:
        return _resolve_shape(shape, per), dcn
    except ValueError as e:
        raise ValueError(
            f"mesh_shape {tuple(shape)} is one slice's mesh here ({n} slices of {per} devices; "
            f"without -1, a shape of all {n * per} devices is the whole mesh): {e}"
        ) from None


def _slice_array(shape: list[int], devices: list[Any]) -> tuple[np.ndarray, Exception | None]:
    """One slice's devices along its physical topology; else in the order given, with why."""
    try:
        return mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True), None
    except Exception as e:
        return np.asarray(devices).reshape(shape), e


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
