"""`prepare-data`: text → unmasked NSP instances on disk, once, in parallel, bounded memory.

One shard per input (a text file, a wiki dump, or one of ``tfds_num_shards`` even parts
of a TFDS split). A worker reads one input, tokenizes it with tensorflow-text's
FastBertTokenizer (`tokenization.WordPieceTokenizer.tokenize`), holds out ``eval_fraction`` of its
documents, pairs the rest ``dupe_factor`` times exactly as the original
`create_pretraining_data.py` (`pretraining_examples.create_instances`, NotNext segments drawn
from the same input), and writes the records. Memory is bounded by one input, not the
corpus. Masks are not written: they are drawn at training time (`masking.py`).

Shards are written to a temporary name and renamed, then their ``.json`` marks them done,
so an interrupted preparation resumes where it stopped (a folder of other settings, or a
finished one, is refused before anything is written: `prepared_output`). On a pod every
host runs the same command with its ``task_index``/``num_tasks`` and prepares its share of
the shards into one shared folder; whoever finishes last writes ``metadata.json``.

Pairing randomness of shard ``i``, pairing ``d`` is ``default_rng([random_seed, i, d])``;
the held-out documents of shard ``i`` are chosen by ``default_rng([EVAL_SEED, i])`` and
paired once with ``default_rng([EVAL_SEED, i, 1])``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import glob
import itertools
import json
import multiprocessing
import os

import numpy as np

from bert_jax.data import corpora, prepared_output, pretraining_examples, records, tokenization, user_paths
from bert_jax.data.progress import ProgressLines
from bert_jax.storage import atomic_files

EVAL_SEED = 20_190_524  # held-out documents and masks never depend on the training seed


@dataclasses.dataclass(frozen=True)
class Options:
    """The flags that determine the prepared instances (recorded in metadata.json)."""

    vocab_file: str = ""
    # None: as recorded beside the vocabulary, else True (`tokenization.casing`; `resolved`).
    do_lower_case: bool | None = None
    tokenizer: str = "wordpiece"
    max_seq_length: int = 128
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    random_seed: int = 12345
    nsp: bool = True
    eval_fraction: float = 0.0
    # RoBERTa's FULL-SENTENCES rows (`pretraining_examples.create_full_sentence_instances`):
    # documents streamed into full rows, no NSP pairs (needs nsp=False).
    full_sentences: bool = False

    def __post_init__(self) -> None:
        if self.full_sentences and self.nsp:
            raise ValueError("full_sentences rows have no sentence pairs: set nsp=False with them")

    @classmethod
    def from_flags(cls, flag_values) -> Options:
        """From the absl flags of the same names (`prepare-data`, `create-data`); options
        without such a flag keep their defaults."""
        names = [f.name for f in dataclasses.fields(cls) if f.name in flag_values]
        return cls(**{n: flag_values[n].value for n in names})

    def resolved(self) -> Options:
        """These options with the casing decided and the vocabulary named: the default one,
        or the file in a folder given (`tokenization.vocab_in_folder`)."""
        vocab_file, kind = tokenization.vocab_in_folder(self.vocab_file, self.tokenizer)
        out = dataclasses.replace(
            self,
            vocab_file=vocab_file,
            tokenizer=kind,
            do_lower_case=tokenization.casing(self.do_lower_case, vocab_file),
        )
        if out.tokenizer == "wordpiece" and not out.vocab_file:
            return dataclasses.replace(out, vocab_file=tokenization.default_vocab_file())
        return out

    def flags(self) -> dict:
        out = dataclasses.asdict(self)
        del out["vocab_file"]  # the vocabulary is recorded by its hash
        # Options added after the format: recorded only when set, so that folders prepared
        # before they existed (and their cache keys) stay valid.
        for name in _ADDED_LATER:
            if out[name] == getattr(Options, name):
                del out[name]
        return out


_ADDED_LATER = ("full_sentences",)


@dataclasses.dataclass(frozen=True)
class Input:
    """One input of a preparation: a file, or the bytes ``[start, end)`` of a large text
    file (`split_text_file`), the BBC News train articles (``reader="bbc_news"``, `path`
    their folder) or part `part` of `parts` of a TFDS split."""

    path: str
    tfds_split: str = ""
    part: int = 0
    parts: int = 1
    reader: str = ""
    start: int = 0
    end: int = -1  # -1: to the end of the file
    data_dir: str = ""  # a TFDS part's data folder ("": TFDS's own); not what identifies the data

    def describe(self) -> str:
        if self.reader:
            return f"{self.reader}:{self.path}"
        if self.tfds_split:
            return f"tfds:{self.path}[{self.tfds_split} {self.part + 1}/{self.parts}]"
        return self.path if self.end < 0 else f"{self.path}[bytes {self.start}:{self.end}]"

    def size(self) -> int:
        if self.reader == "bbc_news":
            return sum(os.path.getsize(f) for f in glob.glob(os.path.join(self.path, "*", "*.txt")))
        if self.tfds_split:
            return 1
        return (self.end if self.end >= 0 else os.path.getsize(self.path)) - self.start

    def documents(self) -> list[corpora.Document]:
        if self.tfds_split:
            docs = corpora.read_tfds(
                self.path, split=self.tfds_split, part=self.part, parts=self.parts, data_dir=self.data_dir
            )
        elif self.reader == "bbc_news":
            docs = corpora.read_bbc_news(self.path)
        elif self.path.endswith((".xml", ".xml.bz2", ".bz2")):
            docs = corpora.read_wiki_dump(self.path)
        else:
            docs = corpora.read_text_file(self.path, self.start, self.end)
        return corpora.keep_usable(docs, self.describe())  # skips counted in one warning


# A text file larger than this is prepared in parts of about this size, cut at document
# boundaries (`split_text_file`): every worker can take a part of one huge file, and a
# worker's memory is bounded by a part, not by the file.
PART_BYTES = 8 << 20


def split_text_file(path: str, part_bytes: int = PART_BYTES) -> list[Input]:
    """A text file of the original format as one input, or, above `part_bytes`, as parts
    of about that size, each ending with a blank line (the end of a document): together
    they hold exactly the file's documents. The cut points depend on the file and
    `part_bytes` only, so the instances do not depend on how many workers prepare them."""
    size = os.path.getsize(path)
    if size <= part_bytes or path.endswith((".xml", ".bz2")):
        return [Input(path)]
    bounds = [0]
    with open(path, "rb") as f:
        while bounds[-1] + part_bytes < size:
            f.seek(bounds[-1] + part_bytes)
            f.readline()  # to the start of the next line
            line = f.readline()
            while line and line.strip():  # to the next blank line: a document ends there
                line = f.readline()
            cut = f.tell()
            if not line or cut >= size:
                break
            bounds.append(cut)
    bounds.append(size)
    if len(bounds) == 2:
        return [Input(path)]
    return [Input(path, start=a, end=b) for a, b in itertools.pairwise(bounds)]


def list_inputs(
    input_file: str = "",
    tfds_name: str = "",
    tfds_split: str = "train",
    tfds_num_shards: int = 1,
    part_bytes: int = PART_BYTES,
    flag: str = "--input_file",
    tfds_data_dir: str = "",
) -> list[Input]:
    """The inputs of a preparation, in a fixed order: sorted files (each large one in its
    parts, `split_text_file`), or TFDS parts. A glob matching nothing or a folder is
    refused, naming `flag` (where `input_file` came from)."""
    if tfds_name:
        n = tfds_num_shards
        return [Input(tfds_name, tfds_split, i, n, data_dir=tfds_data_dir) for i in range(n)]
    patterns = [p for p in input_file.split(",") if p]
    if not patterns:
        raise ValueError(f"no input: pass {flag}=GLOB[,GLOB...] or --tfds_name=NAME")
    files = user_paths.input_files(patterns, flag)
    return [part for f in files for part in split_text_file(f, part_bytes)]


def ensure_tfds(inputs: list[Input], build: bool = True) -> None:
    """`corpora.ensure_tfds` for each TFDS dataset among `inputs`, once, before workers
    read their parts."""
    for name, data_dir in dict.fromkeys((i.path, i.data_dir) for i in inputs if i.tfds_split):
        corpora.ensure_tfds(name, data_dir, build)


def load_tokenizer(opts: Options):
    """The tokenizer of a preparation (loaded once per process)."""
    return tokenization.cached_tokenizer(opts.vocab_file, opts.do_lower_case, opts.tokenizer)


def tokenize_documents(tok, texts: list[corpora.Document]) -> list[pretraining_examples.TokenDoc]:
    """Sentences → ids in one batched call; documents left with < 2 sentences dropped."""
    flat = tok.tokenize([s for d in texts for s in d])
    docs, i = [], 0
    for d in texts:
        sentences = [s for s in flat[i : i + len(d)] if s]
        i += len(d)
        if len(sentences) >= 2:
            docs.append(sentences)
    return docs


def split_held_out(docs: list, eval_fraction: float, shard: int) -> tuple[list, list]:
    """(train, held-out) documents of one shard: a fixed ``eval_fraction`` of them, at
    least one where the fraction is not 0 and the shard has two or more."""
    num_eval = round(len(docs) * eval_fraction)
    if eval_fraction > 0 and len(docs) >= 2:
        num_eval = min(max(num_eval, 1), len(docs) - 1)
    held = set(np.random.default_rng([EVAL_SEED, shard]).permutation(len(docs))[:num_eval].tolist())
    return [d for i, d in enumerate(docs) if i not in held], [d for i, d in enumerate(docs) if i in held]


def shard_instances(
    docs: list, opts: Options, special, seed: list[int], offsets: list | None = None, materialize: bool = True
) -> list:
    """One pairing of a shard's documents (the original's logic), or one pass of
    FULL-SENTENCES rows, from ``default_rng(seed)``. Storage needs only the pairs' pieces
    (``materialize=False``, with the documents' `offsets` computed once per shard)."""
    rng = np.random.default_rng(seed)
    if opts.full_sentences:
        return pretraining_examples.create_full_sentence_instances(docs, opts.max_seq_length, rng, special)
    return pretraining_examples.create_instances(
        docs, opts.max_seq_length, opts.short_seq_prob, rng, special, opts.nsp, offsets, materialize
    )


def prepare_shard(item: Input, index: int, count: int, out_dir: str, opts: Options) -> dict:
    """Reads, tokenizes, pairs and writes one shard; returns its counts (also its .json)."""
    stem = records.shard_stem(index, count)
    tok = load_tokenizer(opts)
    dtype = records.token_dtype(tok.vocab_size)
    # Held out by document before tokenizing, as a vocabulary learned on the training
    # documents (`run_vocabulary.vocab_file_of`) chooses them.
    train_text, held_out_text = split_held_out(item.documents(), opts.eval_fraction, index)
    train, held_out = tokenize_documents(tok, train_text), tokenize_documents(tok, held_out_text)
    docs = train + held_out
    # (documents, seed) of each pairing: dupe_factor of the training documents, one of the
    # held-out ones; paired one at a time as they are written.
    pairings = {
        "train": [(train, [opts.random_seed, index, d]) for d in range(opts.dupe_factor)],
        "eval": [(held_out, [EVAL_SEED, index, 1])] if held_out else [],
    }
    counts: dict[str, int] = {}
    files: dict[str, int] = {}
    for split, split_docs in (("train", train), ("eval", held_out)):
        prefix = os.path.join(out_dir, f"{stem}.{split}")
        with records.SplitWriter(prefix, dtype, atomic_files.temp_path) as writer:
            writer.add_documents(split_docs)
            offsets = pretraining_examples.token_offsets(split_docs)
            for pairing_docs, seed in pairings[split]:
                writer.add_instances(
                    shard_instances(pairing_docs, opts, tok.special, seed, offsets, materialize=False)
                )
        counts[split], counts[f"{split}_tokens"] = writer.count, writer.written
        files.update({os.path.basename(f): os.path.getsize(f) for f in writer.final})
    info = {
        "stem": stem,
        "input": item.describe(),
        "documents": len(docs),
        "tokens": sum(len(s) for d in docs for s in d),
        **counts,
        "files": files,
        "flags": opts.flags(),
        "vocab_sha256": records.file_sha256(opts.vocab_file),  # a resumed folder must match
    }
    atomic_files.write_json(os.path.join(out_dir, f"{stem}.json"), info, indent=1, sort_keys=True)
    return info


def _done(out_dir: str, stem: str, opts: Options) -> dict | None:
    """The counts of a finished shard (None if it is not finished)."""
    path = os.path.join(out_dir, f"{stem}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        info = json.load(f)
    if info["flags"] != opts.flags():
        raise ValueError(
            f"{out_dir} holds a preparation with other flags ({path}: {info['flags']}); "
            "use another --output_dir or the same flags"
        )
    if "train_tokens" not in info:  # a shard of format 1, from an older preparation: redone
        return None
    return info


class NoUsableDocuments(ValueError):
    """Every shard is finished and none holds a training instance."""


def write_metadata(out_dir: str, inputs: list[Input], opts: Options) -> dict | None:
    """metadata.json once every shard is done (by any host); None while some are missing."""
    infos = [_done(out_dir, records.shard_stem(i, len(inputs)), opts) for i in range(len(inputs))]
    if any(i is None for i in infos):
        return None
    tok = load_tokenizer(opts)
    totals = {k: sum(i[k] for i in infos) for k in ("documents", "tokens", "train", "eval")}
    if totals["train"] == 0:
        where = f"{inputs[0].describe()}{' ...' if len(inputs) > 1 else ''}"
        if not totals["documents"]:
            raise NoUsableDocuments(f"no usable documents (two or more sentences) in {where}")
        raise NoUsableDocuments(
            f"the {totals['documents']} document(s) of {where} make no training row at "
            f"max_seq_length={opts.max_seq_length}: a sentence pair needs sentences shorter than the row "
            "or a second document (one sentence per line, a blank line between documents)"
        )
    meta = {
        "format_version": records.FORMAT_VERSION,
        "flags": opts.flags(),
        "vocab_file": opts.vocab_file,
        "vocab_sha256": records.file_sha256(opts.vocab_file),
        "vocab_size": tok.vocab_size,
        "special": {"cls": tok.special.cls, "sep": tok.special.sep, "pad": tok.special.pad},
        "dtype": records.token_dtype(tok.vocab_size).str,
        "counts": totals,
        "shards": [
            {
                k: i[k]
                for k in ("stem", "input", "train", "eval", "tokens", "train_tokens", "eval_tokens", "files")
            }
            for i in infos
        ],
    }
    atomic_files.write_json(os.path.join(out_dir, records.METADATA), meta, indent=1, sort_keys=True)
    return meta


def prepare(
    inputs: list[Input],
    out_dir: str,
    opts: Options,
    *,
    num_workers: int = 1,
    task_index: int = 0,
    num_tasks: int = 1,
    progress: bool = True,
    overwrite: bool = False,
    name: str = "--output_dir",
    hosts: int | None = None,
) -> dict | None:
    """Prepares this task's shards (skipping finished ones); returns the metadata, or None
    while other tasks' shards are still missing. The vocabulary and the folder are checked
    before anything is written (`prepared_output.check_folder`; `overwrite` replaces a
    finished or different preparation); a failed attempt removes the folders it made where
    it leaves them empty. A TFDS input is built here first where one host prepares (`hosts`,
    by default `num_tasks`; a run's cache is prepared by each of its hosts alike), else it
    must be prepared already."""
    opts = opts.resolved()
    load_tokenizer(opts)  # a bad vocabulary is refused before the folder exists
    if overwrite and num_tasks > 1:
        raise ValueError(
            f"--overwrite with --num_tasks={num_tasks}: hosts would remove each other's shards; "
            f"empty {name} {out_dir} once, then prepare without --overwrite"
        )
    count = len(inputs)
    stems = {records.shard_stem(i, count): item.describe() for i, item in enumerate(inputs)}
    earlier = prepared_output.check_folder(
        out_dir, stems, opts.flags(), records.file_sha256(opts.vocab_file), overwrite=overwrite, name=name
    )
    with user_paths.removed_if_failed(out_dir):
        user_paths.replace(earlier, name)
        os.makedirs(out_dir, exist_ok=True)
        try:
            mine = range(task_index, count, num_tasks)
            build = (num_tasks if hosts is None else hosts) == 1  # TFDS: built here where one host prepares
            _prepare_shards(inputs, out_dir, opts, num_workers, mine, progress, build=build)
            return write_metadata(out_dir, inputs, opts)
        except NoUsableDocuments:
            for stem in stems:  # every shard is finished and empty: nothing to resume
                for path in glob.glob(os.path.join(glob.escape(out_dir), f"{stem}.*")):
                    os.remove(path)
            raise


def _prepare_shards(
    inputs: list[Input],
    out_dir: str,
    opts: Options,
    num_workers: int,
    mine: range,
    progress: bool,
    build: bool = True,
) -> None:
    """Prepares the shards `mine` that are not finished yet, `num_workers` at a time. A
    TFDS dataset is built first, here, where `build` (one host), else must be prepared."""
    count = len(inputs)
    todo = [i for i in mine if _done(out_dir, records.shard_stem(i, count), opts) is None]
    ensure_tfds([inputs[i] for i in todo], build)
    for i in todo:  # leftovers of a killed worker (each shard belongs to one task only)
        for stale in glob.glob(os.path.join(glob.escape(out_dir), f"{records.shard_stem(i, count)}.*.tmp*")):
            if not atomic_files.writer_alive(stale):
                os.remove(stale)
    by_bytes = not inputs[0].tfds_split
    bar = ProgressLines(
        "prepare-data",
        sum(inputs[i].size() for i in todo) if by_bytes else len(todo),
        "B" if by_bytes else "shards",
        enabled=progress,
    )

    def finished(i: int, info: dict) -> None:
        bar.advance(inputs[i].size() if by_bytes else 1, tokens=info["tokens"])

    try:
        if num_workers <= 1 or len(todo) <= 1:
            for i in todo:
                finished(i, prepare_shard(inputs[i], i, count, out_dir, opts))
        else:
            context = multiprocessing.get_context("spawn")  # TensorFlow does not survive fork
            with concurrent.futures.ProcessPoolExecutor(
                min(num_workers, len(todo)), mp_context=context
            ) as pool:
                futures = {pool.submit(prepare_shard, inputs[i], i, count, out_dir, opts): i for i in todo}
                for future in concurrent.futures.as_completed(futures):
                    finished(futures[future], future.result())
    finally:
        bar.close()
