"""The BERT model: config, building blocks, encoder, heads, and what is computed from them."""
