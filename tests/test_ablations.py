"""The ablation tables: rows as the paper's, and `bert-jax ablate` end to end on Table 5."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bert_jax import ablations
from configs import ablations as ablation_configs
from tests.test_finetune import _sst2

ROOT = Path(__file__).resolve().parents[1]


def test_tables_hold_the_papers_rows() -> None:
    t6 = ablation_configs.get_config("table6.tiny")
    sizes = [(r.model.num_hidden_layers, r.model.hidden_size, r.model.num_attention_heads) for r in
             (t6.rows[n] for n in t6.row_order)]  # fmt: skip
    assert sizes == [(3, 768, 12), (6, 768, 3), (6, 768, 12), (12, 768, 12), (12, 1024, 16), (24, 1024, 16)]
    assert all(t6.rows[n].model.intermediate_size == 4 * t6.rows[n].model.hidden_size for n in t6.row_order)
    t8 = ablation_configs.get_config("table8")
    mixes = [(t8.rows[n].data.mask_token_prob, t8.rows[n].data.random_token_prob) for n in t8.row_order]
    assert mixes == [(0.8, 0.1), (1.0, 0.0), (0.8, 0.2), (0.8, 0.0), (0.0, 0.8), (0.0, 1.0)]
    assert t8.preset == "base" and t8.rows["mask100_same0_rnd0"].model.num_hidden_layers == 12
    t5 = ablation_configs.get_config("table5.tiny").rows
    assert t5.bert_base.data.nsp and not t5.no_nsp.data.nsp
    assert t5.ltr_no_nsp.data.objective == "ltr" and t5.ltr_no_nsp.model.causal_attention
    with pytest.raises(ValueError, match="unknown ablation table 'table9'"):
        ablation_configs.get_config("table9")
    with pytest.raises(KeyError, match=r"'data\.nsq'"):
        ablations.set_keys(t5.bert_base, {"data.nsq": False})


def test_ablate_table5_pretrains_finetunes_and_reports(tmp_path) -> None:
    data = _sst2(tmp_path / "glue")
    steps = "num_train_steps=6,checkpoint_every_steps=6,eval_every_steps=6,async_checkpointing=False"
    cmd = [
        sys.executable, "-m", "bert_jax", "ablate", "--config=configs/ablations.py:table5.tiny",
        f"--workdir={tmp_path / 'ablate'}", f"--set={steps}",
        "--finetune_config=configs/glue.py:sst2", f"--finetune_config.data_dir={data}",
        "--finetune_config.max_seq_length=48", "--finetune_config.batch_size=8",
        "--finetune_config.num_epochs=1", "--finetune_config.max_train_examples=48",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "ablate" / "report.json").read_text())
    rows = {r["row"]: r for r in report["rows"]}
    assert list(rows) == ["bert_base", "no_nsp", "ltr_no_nsp"]
    assert rows["bert_base"]["nsp_accuracy"] is not None and rows["no_nsp"]["nsp_accuracy"] is None
    assert rows["ltr_no_nsp"]["objective"] == "ltr"
    for r in rows.values():
        assert 0.0 <= r["lm_accuracy"] <= 1.0 and r["lm_loss"] > 0 and r["steps"] == 6
        assert r["task"] == "sst2" and 0.0 <= r["dev_score"] <= 1.0
        assert (Path(r["workdir"]) / "vocab.txt").exists()
    md = (tmp_path / "ablate" / "report.md").read_text()
    assert "| ltr_no_nsp | ltr | no |" in md and "sst2 dev accuracy" in md
    # A rerun resumes: nothing is trained again, the report is the same.
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "ablate" / "report.json").read_text()) == report
    assert "resumed from" in again.stdout
