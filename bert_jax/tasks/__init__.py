"""Fine-tuning tasks (§4): each turns its data into model-ready arrays and scores
predictions. `base` says what a task is; one module per task family (`glue` and `bbc`
through `classification`, `squad`, `ner`, `swag`), `with_bilstm` for Table 5's "+ BiLSTM",
`scorers` for the official metrics. `registry.get_task` finds a task by name. The offline
downstream suite (real QA, pair and sentiment data from PyPI packages) is `downstream_*`:
`downstream_data` fetches, `downstream_readers` parses, `downstream_splits` splits,
`downstream_qa` and `downstream_classification` are its tasks.
"""
