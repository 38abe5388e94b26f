"""Which of the three formats a checkpoint folder is, by the names in it."""

from __future__ import annotations


def of_names(names: set[str]) -> str | None:
    """``bert_jax``, ``hf`` or ``tf`` for a folder holding `names` (files and subfolders),
    or None for a folder that is no checkpoint."""
    if "bert_config.json" in names and ({"params", "checkpoints"} & names):
        return "bert_jax"
    if "config.json" in names and ({"model.safetensors", "pytorch_model.bin"} & names):
        return "hf"
    if any(n.endswith(".index") for n in names):
        return "tf"
    return None


def not_a_checkpoint(path: str, inside: list[str] = ()) -> ValueError:
    """The one-line refusal; `inside`: subfolders of `path` that are checkpoints (a
    package's ``model/``, a folder of runs), the first of which it names."""
    named = f": {path.rstrip('/')}/{inside[0]} is one" if inside else ""
    return ValueError(
        f"{path} is not a checkpoint (expected a Hugging Face folder: config.json + "
        "model.safetensors/pytorch_model.bin, an original TF checkpoint: *.index + "
        "bert_config.json, a bert_jax folder: bert_config.json + params/ or checkpoints/, or a run's "
        f"best/ or checkpoints/<step>){named}"
    )
