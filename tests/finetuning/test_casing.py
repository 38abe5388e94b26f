"""The casing a fine-tuning run tokenizes with: ``data.do_lower_case`` where given, else the
one recorded beside the checkpoint's vocabulary (a pre-training workdir records its own),
else lower-case."""

import json

from bert_jax.commands import run_settings
from bert_jax.data.settings import DataSettings
from bert_jax.pretraining import pretrain
from configs import bbc


def test_a_pretraining_workdir_records_its_casing_and_fine_tuning_takes_it(tmp_path) -> None:
    cased, plain = tmp_path / "cased", tmp_path / "plain"
    pretrain.keep_vocab(DataSettings(source="text", input_files="x.txt", do_lower_case=False), str(cased))
    assert json.loads((cased / "tokenizer_config.json").read_text()) == {"do_lower_case": False}
    plain.mkdir()
    (plain / "vocab.txt").write_bytes((cased / "vocab.txt").read_bytes())  # no casing recorded

    settings = run_settings.finetune_settings(bbc.get_config())
    assert settings.data.do_lower_case is None  # not given
    ran = settings.for_checkpoint(str(cased))
    assert ran.data.do_lower_case is False and ran.task_data.do_lower_case is False
    assert ran.config["data"]["do_lower_case"] is False  # the config as the run used it
    assert settings.for_checkpoint(str(plain)).data.do_lower_case is True

    config = bbc.get_config()
    config.data.do_lower_case = True  # given: kept whatever the checkpoint records
    assert run_settings.finetune_settings(config).for_checkpoint(str(cased)).data.do_lower_case is True
