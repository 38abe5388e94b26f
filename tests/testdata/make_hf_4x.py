"""Writes tests/testdata/hf_4x with transformers 4.57: tiny random BERT and ModernBERT folders
in the 4.x schema and the logits 4.57 computes for a fixed padded batch."""
import json, os, sys
import numpy as np, torch, transformers
assert transformers.__version__.startswith("4."), transformers.__version__
out = sys.argv[1]
ids = np.random.default_rng(0).integers(5, 96, (3, 16)); mask = np.ones_like(ids); mask[1, 10:] = 0; mask[2, 5:] = 0
def perturb(m, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters(): p.add_(0.05 * torch.randn_like(p))
    return m.eval()
bert = perturb(transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=96, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)), 0)
modern = perturb(transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(vocab_size=96, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=24, max_position_embeddings=32, global_rope_theta=50000.0, local_rope_theta=500.0, global_attn_every_n_layers=2, local_attention=6, pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3)), 1)
for name, m in (("bert_mlm", bert), ("modernbert_mlm", modern)):
    folder = os.path.join(out, name)
    m.save_pretrained(folder)
    m = type(m).from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        logits = m(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.savez(os.path.join(folder, "expected.npz"), input_ids=ids, attention_mask=mask, logits=logits)
print(open(os.path.join(out, "modernbert_mlm", "config.json")).read())
