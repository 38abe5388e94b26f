"""Reading a run config (`configs/*.py`): loading it by path, setting keys, and the names
that were removed (one name per setting: a removed one is refused, not ignored). Its
values become typed settings at the command's edge (`bert_jax.commands.run_settings`)."""

from __future__ import annotations

import importlib.util
import json
import os
from types import ModuleType
from typing import Any

import ml_collections

# Settings that had another name; the config must use the one on the right. The run's
# numerics left the model (they apply to the whole run, never saved with the model);
# fine-tuning took pre-training's names for the settings the two jobs share.
REMOVED_KEYS = {
    "model.dtype": "compute_dtype",
    "model.remat_policy": "remat_policy",
    "model.weight_grad_matmul": "weight_grad_matmul",
    "model.dropout_rng": "dropout_rng",
    "batch_size": "global_batch_size",
    "dropout": "model.hidden_dropout_prob and --config.model.attention_probs_dropout_prob",
    "vocab_file": "data.vocab_file",
    "do_lower_case": "data.do_lower_case",
    "vocab_pad_multiple": "model.vocab_pad_multiple",
    "model.scan_layers": "layer_loop ('auto', 'scan' or 'unroll')",
}


def _has(config: ml_collections.ConfigDict, dotted: str) -> bool:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            return False
        node = node[part]
    return True


# What marks each job's config: pre-training configs have a data source and a model
# shape, fine-tuning configs a `task`.
_JOB_MARKS = {"pretrain": ("data.source", "model.hidden_size"), "finetune": ("task",)}


def check(config: ml_collections.ConfigDict, job: str | None = None) -> None:
    """Refuses a config written for the other job (`job`: "pretrain" or "finetune") or one
    that sets a removed name (naming the one to use); the values are the resolver's
    (`bert_jax.training.resolver`)."""
    if job is not None and not all(_has(config, k) for k in _JOB_MARKS[job]):
        other = next(j for j in _JOB_MARKS if j != job)
        kind = "a fine-tuning" if other == "finetune" else "a pre-training"
        raise ValueError(
            f"--config is {kind} config (it has no config.{_JOB_MARKS[job][0]}): run `bert-jax {other}`"
        )
    for old, new in REMOVED_KEYS.items():
        if _has(config, old):
            raise ValueError(f"config.{old} was removed: set --config.{new} instead")


def sibling(config_file: str, name: str) -> ModuleType:
    """The config file `name`.py beside `config_file`, as a module: config files are
    loaded by path (absl's config_flags), so `configs/` need not be importable."""
    path = os.path.join(os.path.dirname(os.path.abspath(config_file)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_bert_jax_config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def set_keys(config: ml_collections.ConfigDict, changes: dict[str, Any]) -> ml_collections.ConfigDict:
    """Sets dotted keys (``data.nsp``); a key the config does not have is an error naming it."""
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = config
        for p in parents:
            if p not in node:
                raise KeyError(f"{dotted!r}: the config has no {p!r}")
            node = node[p]
        if leaf not in node:
            renamed = f": it is now {REMOVED_KEYS[dotted]!r}" if dotted in REMOVED_KEYS else ""
            raise KeyError(f"{dotted!r}: the config has no such key{renamed}")
        node[leaf] = value
    return config


# The folder that holds `bert_jax/` and, in a checkout, `configs/`.
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config_file(path: str) -> str:
    """Where a config file is: `path` itself when it exists (a relative one in the working
    folder), else a relative `path` under the repository this bert_jax runs from, so that
    ``configs/pretrain.py`` is found from any folder."""
    if os.path.exists(path):
        return path
    beside = os.path.join(REPOSITORY, path)
    if not os.path.isabs(path) and os.path.exists(beside):
        return beside
    where = "" if os.path.isabs(path) else f" (in {os.getcwd()} or {REPOSITORY})"
    raise FileNotFoundError(f"config file {path} does not exist{where}")


def load_config(spec: str) -> ml_collections.ConfigDict:
    """A run config from ``PATH[:ARG]`` as the command line's ``--config`` takes it, e.g.
    ``load_config("configs/pretrain.py:demo")`` (for notebooks; the CLI reads the same
    files through absl's config flags). A relative PATH is looked for in the working
    folder, then in the repository (`config_file`)."""
    path, _, arg = spec.partition(":")
    path = config_file(path)
    name = os.path.splitext(os.path.basename(path))[0]
    module = sibling(path, name)
    return module.get_config(arg) if arg else module.get_config()


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys (``data.vocab_file``) → values, as JSON has them (tuples as lists)."""
    out: dict[str, Any] = {}
    for key, value in json.loads(json.dumps(config, default=str)).items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_keys(
    recorded: dict[str, Any], current: dict[str, Any], ignored: tuple[str, ...] = ()
) -> list[str]:
    """``key: recorded there, current now`` for every key of two configs as written whose
    value differs, but the `ignored` ones (how a run is carried out): dotted keys, or
    top-level keys with all under them."""
    before, now = flat(recorded), flat(current)
    keys = sorted(
        k for k in before.keys() | now.keys() if k not in ignored and k.split(".")[0] not in ignored
    )
    missing = "(none)"
    return [
        f"{k}: {before.get(k, missing)!r} there, {now.get(k, missing)!r} now"
        for k in keys
        if before.get(k, missing) != now.get(k, missing)
    ]
