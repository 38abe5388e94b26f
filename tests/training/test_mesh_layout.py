"""`sharding.make_mesh` device layout: the topology-aware order, one warning line when it
falls back to the order given, and hybrid (multislice) meshes with data across slices.

The TPU cases use compile-only devices of `jax.experimental.topologies` (libtpu, the test
extra); no TPU is needed."""

from __future__ import annotations

import dataclasses
import random

import jax
import numpy as np
import pytest

from bert_jax.training import sharding


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning:")]


def test_cpu_mesh_is_silent_and_a_failed_layout_is_one_warning_line(capsys, monkeypatch) -> None:
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    assert mesh.devices.shape == (1, 1, 1) and not capsys.readouterr().out

    def fail(*args, **kwargs):
        raise RuntimeError("no physical layout\nsecond line")

    monkeypatch.setattr(sharding.mesh_utils, "create_device_mesh", fail)
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    out = capsys.readouterr().out
    (line,) = _warnings(out)
    assert out.strip() == line
    assert "mesh (1, 1, 1)" in line and "RuntimeError: no physical layout" in line
    assert "second line" not in line
    assert mesh.devices.ravel().tolist() == jax.devices()[:1]


def _topology(name: str, **kwargs) -> list:
    pytest.importorskip("libtpu")
    from jax.experimental import topologies

    return list(topologies.get_topology_desc(platform="tpu", topology_name=name, **kwargs).devices)


def test_tpu_devices_that_form_no_cuboid_fall_back_with_a_warning(capsys) -> None:
    devices = _topology("v5e:2x2")[:3]  # three of four chips: a hole in the 2x2 torus
    mesh = sharding.make_mesh((3, 1, 1), devices)
    (line,) = _warnings(capsys.readouterr().out)
    assert "mesh (3, 1, 1) on 3 TPU v5 lite devices" in line
    assert mesh.devices.ravel().tolist() == devices
    sharding.make_mesh((2, 2, 1), _topology("v5e:2x2"))  # the whole slice: laid out, silent
    assert not _warnings(capsys.readouterr().out)


def test_multislice_devices_get_a_hybrid_mesh_with_data_across_slices(capsys) -> None:
    from jax.experimental import mesh_utils

    devices = _topology("v5e:2x2", num_slices=2)
    assert sorted({d.slice_index for d in devices}) == [0, 1]
    # The whole mesh (no -1, all 8 devices), or one slice's mesh with -1 (the presets'
    # (1, -1, 1)): the slices go along data either way.
    for shape, whole in (((4, 2, 1), (4, 2, 1)), ((2, 2, 2), (2, 2, 2)), ((-1, 1, 2), (4, 1, 2)),
                         ((1, -1, 1), (2, 4, 1)), ((1, 2, -1), (2, 2, 2))):  # fmt: skip
        mesh = sharding.make_mesh(shape, devices)
        assert mesh.devices.shape == whole, shape
        half = mesh.devices.shape[0] // 2
        for s, rows in enumerate((mesh.devices[:half], mesh.devices[half:])):
            assert {d.slice_index for d in rows.ravel()} == {s}
            # Inside a slice, the layout is the slice's own physical one.
            slice_devices = [d for d in devices if d.slice_index == s]
            want = mesh_utils.create_device_mesh(rows.shape, slice_devices, allow_split_physical_axes=True)
            assert rows.tolist() == want.tolist()
    assert not _warnings(capsys.readouterr().out)
    # fsdp across the slices instead, when asked for.
    mesh = sharding.make_mesh((1, -1, 1), devices, dcn_shape=(1, -1, 1))
    assert mesh.devices.shape == (1, 8, 1)
    assert [d.slice_index for d in mesh.devices.ravel()] == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError, match=r"mesh_shape \(1, 4, 2\): the data axis \(1\) .* 2 slices"):
        sharding.make_mesh((1, 4, 2), devices)
    with pytest.raises(ValueError, match=r"mesh_shape \(1, 3, 1\) is one slice's mesh here \(2 slices of 4"):
        sharding.make_mesh((1, 3, 1), devices)
    with pytest.raises(ValueError, match=r"slices differ in size \(4, 3 devices\)"):
        sharding.make_mesh((1, -1, 1), devices[:7])


@dataclasses.dataclass(frozen=True)
class _Device:
    id: int
    slice_index: int
    platform: str = "cpu"
    device_kind: str = "cpu"
    process_index: int = 0


def test_slices_take_contiguous_blocks_of_the_data_axis_whatever_the_device_order() -> None:
    devices = [_Device(i, i // 4) for i in range(12)]  # 3 slices of 4
    random.Random(0).shuffle(devices)
    array = sharding.device_array((6, 2, 1), devices)
    slice_of_row = [{d.slice_index for d in array[r].ravel()} for r in range(6)]
    assert slice_of_row == [{0}, {0}, {1}, {1}, {2}, {2}]
    assert sorted(d.id for d in np.ravel(array)) == list(range(12))


def test_processes_can_stand_for_slices() -> None:
    """CPU and GPU devices carry no slice index: `by_process` makes each process a slice."""
    devices = [_Device(i, 0, process_index=i // 2) for i in range(4)]  # 2 processes of 2
    assert sharding.device_array((1, -1, 1), devices).shape == (1, 4, 1)  # one "slice"
    array = sharding.device_array((1, -1, 1), devices, slice_of=sharding.by_process)
    assert [[d.process_index for d in row.ravel()] for row in array] == [[0, 0], [1, 1]]
