"""Writes tests/testdata/hf_4x with transformers 4.57 (run with that release importable, e.g.
``pip install --target DIR transformers==4.57.6 tokenizers==0.22.2 huggingface_hub==0.36.0``
then ``PYTHONPATH=DIR python tests/testdata/make_hf_4x.py tests/testdata/hf_4x``): tiny random
BERT and ModernBERT folders in the 4.x schema, and the logits 4.57 computes for a fixed
padded batch (``expected.npz``)."""

import os
import sys

import numpy as np
import torch
import transformers


def _perturbed(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def main(out: str) -> None:
    assert transformers.__version__.startswith("4."), transformers.__version__
    ids = np.random.default_rng(0).integers(5, 96, (3, 16))
    mask = np.ones_like(ids)
    mask[1, 10:], mask[2, 5:] = 0, 0
    small = dict(vocab_size=96, hidden_size=16, num_attention_heads=2, max_position_embeddings=32)
    bert = transformers.BertConfig(**small, num_hidden_layers=2, intermediate_size=32)
    modern = transformers.ModernBertConfig(
        **small, num_hidden_layers=3, intermediate_size=24, global_rope_theta=50000.0,
        local_rope_theta=500.0, global_attn_every_n_layers=2, local_attention=6,
        pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
    )  # fmt: skip
    models = {
        "bert_mlm": _perturbed(transformers.BertForMaskedLM(bert), 0),
        "modernbert_mlm": _perturbed(transformers.ModernBertForMaskedLM(modern), 1),
    }
    for name, model in models.items():
        folder = os.path.join(out, name)
        model.save_pretrained(folder)
        model = type(model).from_pretrained(folder, attn_implementation="eager").eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
        np.savez(os.path.join(folder, "expected.npz"), input_ids=ids, attention_mask=mask, logits=logits)


if __name__ == "__main__":
    main(sys.argv[1])
