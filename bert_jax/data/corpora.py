"""Raw corpora → documents (lists of sentences), the input of `pretraining_examples.py`.

Formats:
- ``text``: the original `create_pretraining_data.py` format — one sentence per line,
  blank lines between documents;
- ``wiki_excerpt``: the English Wikipedia excerpt shipped in gensim's test data (the
  embedded default), parsed offline from its bz2 XML dump;
- ``bbc_news``: the BBC News articles of the `bbc` fine-tuning task's train split (its
  dev articles never, so pre-training on them does not see the task's dev set): the
  title, then the body's sentences;
- ``tfds``: a TFDS dataset by name (e.g. ``wikipedia/20230601.en``) on a machine with a
  network, its ``text`` feature split into sentences.

Bytes that are not UTF-8 are replaced by U+FFFD and counted in one ``warning:`` line per
file (`text_files`); an empty file is an error that names it; documents of fewer than two
sentences are skipped and counted in one ``warning:`` line (`keep_usable`): NSP needs two.

Prose with one paragraph per line and a blank line between paragraphs (articles joined
into one file) reads, in the ``text`` format, as one-line documents, which hold no
sentence pair and would be skipped whole. So a ``text`` document that is a single line is taken as a
paragraph and split into sentences (`split_paragraph`: after ``.``, ``!`` or ``?`` and
an optional closing quote or bracket, at whitespace followed by a capital letter, a digit
or an opening quote or bracket); the documents split are counted in one ``warning:``
line per file. Documents of two or more lines are read as they are, one sentence per line,
unless most of their lines hold several sentences (`_lines_are_paragraphs`): a file of one
document (or paragraph) a line with no blank lines, as gensim's Lee corpus or a dataset's
``text`` column written out; each such line is then a document of its sentences, counted
in another ``warning:`` line.
"""

from __future__ import annotations

import bz2
import glob
import html
import importlib.util
import os
import re
import socket
import urllib.parse
from collections.abc import Iterable, Iterator

from bert_jax.data import bbc_news, text_files
from bert_jax.storage import tensorflow_runtime

Document = list[str]

WIKI_EXCERPT = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def wiki_excerpt_path() -> str:
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the embedded Wikipedia excerpt ships with gensim's test data: pip install gensim"
        )
    path = os.path.join(os.path.dirname(spec.origin), "test", "test_data", WIKI_EXCERPT)
    if not os.path.exists(path):
        raise FileNotFoundError(f"gensim is installed but {path} is missing")
    return path


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    """A light rule-based splitter (terminal punctuation followed by a capital)."""
    return [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]


# After ".", "!" or "?" (and a closing quote or bracket, kept with its sentence): whitespace,
# then a capital, a digit or an opening quote or bracket.
_PARAGRAPH_BREAK = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")


def split_paragraph(paragraph: str) -> list[str]:
    """The sentences of a paragraph of a text file (`read_text_file`): as
    `split_sentences`, but a closing quote or bracket stays with its sentence."""
    return [s.strip() for s in _PARAGRAPH_BREAK.split(paragraph) if s.strip()]


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """Prints ``warning: message`` the first time this process meets it: a run reads the
    same file for its vocabulary and again for each sequence length, and says so once."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", flush=True)


def keep_usable(docs: Iterable[Document], where: str) -> list[Document]:
    """The documents of two or more sentences (an NSP pair needs two); the others are
    skipped and counted in one ``warning:`` line naming `where`."""
    kept, skipped = [], 0
    for doc in docs:
        if len(doc) >= 2:
            kept.append(doc)
        else:
            skipped += 1
    if skipped:
        warn_once(f"{where}: skipped {skipped} documents with fewer than two sentences")
    return kept


def _strip_nested(text: str, opening: str, closing: str) -> str:
    """Removes (possibly nested) spans such as {{templates}} and {| tables |}."""
    pattern = re.compile(
        re.escape(opening) + r"(?:(?!" + re.escape(opening) + r").)*?" + re.escape(closing), re.S
    )
    previous = None
    while previous != text:
        previous, text = text, pattern.sub("", text)
    return text


def _link_text(match: re.Match[str]) -> str:
    inner = match.group(1)
    if re.match(r"(?i)(file|image|category|media|[a-z-]{2,12}):", inner):
        return ""
    return inner.split("|")[-1]


def wiki_markup_to_paragraphs(markup: str) -> list[str]:
    """Plain-text paragraphs of one article's wikitext (markup, tables, refs removed)."""
    text = html.unescape(markup)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<ref[^>]*/>", "", text)
    text = re.sub(r"<ref.*?</ref>", "", text, flags=re.S)
    text = re.sub(r"<(math|gallery|timeline|table|pre|code)\b.*?</\1>", "", text, flags=re.S)
    text = _strip_nested(text, "{{", "}}")
    text = _strip_nested(text, "{|", "|}")
    previous = None
    while previous != text:  # links, innermost first (file captions contain links)
        previous, text = text, re.sub(r"\[\[([^\[\]]*)\]\]", _link_text, text)
    text = re.sub(r"\[https?://\S+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"'{2,}", "", text)
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in block.splitlines()]
        lines = [re.sub(r"^[*#:;]+\s*", "", ln) for ln in lines if ln and not ln.startswith("=")]
        lines = [ln for ln in lines if not ln.startswith(("|", "!", "__"))]
        para = " ".join(lines).strip()
        if len(para) > 20:
            paragraphs.append(re.sub(r"\s+", " ", para))
    return paragraphs


def read_wiki_dump(path: str) -> Iterator[Document]:
    """Articles (namespace 0, not redirects) of a MediaWiki XML dump (.xml or .xml.bz2)."""
    opener = bz2.open if path.endswith(".bz2") else open
    with opener(path, "rb") as f:
        data = text_files.decode(f.read(), path)
    for page in re.finditer(r"<page>(.*?)</page>", data, flags=re.S):
        body = page.group(1)
        if "<ns>0</ns>" not in body or "<redirect" in body:
            continue
        m = re.search(r"<text[^>]*>(.*?)</text>", body, flags=re.S)
        if not m:
            continue
        sentences = [s for p in wiki_markup_to_paragraphs(m.group(1)) for s in split_sentences(p)]
        yield sentences


def read_text_file(name: str, start: int = 0, end: int = -1) -> Iterator[Document]:
    """One file of the original format: one sentence per line, blank line between documents
    (its bytes ``[start, end)`` only, with ``end`` -1 meaning the end of the file). A
    one-line document is a paragraph: split into sentences, counted in one warning (see the
    module docstring)."""
    text = text_files.read_text(name, start, end)
    if not text.strip():
        raise ValueError(f"input file {name} is empty")
    split = lines = 0
    for doc in _line_groups(text):
        if len(doc) > 1 and _lines_are_paragraphs(doc):
            lines += len(doc)
            yield from (split_paragraph(line) for line in doc)
            continue
        sentences = split_paragraph(doc[0]) if len(doc) == 1 else doc
        split += len(sentences) > len(doc)
        yield sentences
    where = name if start == 0 and end < 0 else f"{name}[bytes {start}:{end if end >= 0 else 'end'}]"
    if split:
        warn_once(
            f"{where}: split {split} one-line documents (paragraphs) into sentences at . ! or ? before a "
            "capital; the text format is one sentence per line, a blank line between documents"
        )
    if lines:
        warn_once(
            f"{where}: read {lines} lines of several sentences each, with no blank line between them, as "
            "one document a line, split into sentences at . ! or ? before a capital; the text format is "
            "one sentence per line, a blank line between documents"
        )


PARAGRAPH_SAMPLE = 32  # lines of a document looked at to tell paragraphs from sentences


def _lines_are_paragraphs(doc: Document) -> bool:
    """Whether a document's lines are paragraphs (or documents: a file of one document a
    line) rather than sentences: more than half of its first `PARAGRAPH_SAMPLE` lines hold
    two or more sentences. A sentence a line rarely splits (an abbreviation before a
    capital: "Mr. Smith"); such a file would otherwise be one document of paragraph-long
    "sentences", each longer than a pair's room, which pairs into nothing."""
    sample = doc[:PARAGRAPH_SAMPLE]
    return 2 * sum(len(split_paragraph(line)) > 1 for line in sample) > len(sample)


def _line_groups(text: str) -> Iterator[Document]:
    """The non-blank lines of `text`, stripped, in groups separated by blank lines."""
    doc: Document = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def read_text_files(patterns: str) -> Iterator[Document]:
    """Every file matching the globs (joined by commas, as ``--input_files`` takes them),
    each glob's in sorted order (see `read_text_file`)."""
    for pattern in (p for p in patterns.split(",") if p):
        files = sorted(glob.glob(pattern))
        if not files:
            raise FileNotFoundError(f"no input files match {pattern!r}")
        for name in files:
            yield from read_text_file(name)


def read_bbc_news(data_dir: str = "") -> Iterator[Document]:
    """The train-split BBC News articles (`bbc_news`; the `bbc` task's dev articles are
    never pre-trained on): the title, then the body's sentences."""
    for a in bbc_news.read_articles(data_dir, "train"):
        yield [a.title] + [s for p in a.body.split("\n") for s in split_sentences(p)]


# TFDS's own copies of prepared datasets, read in place (`tfds.load(..., try_gcs=True)`).
TFDS_PUBLIC_DATA_DIR = "gs://tfds-data/datasets"


def ensure_tfds(name: str, data_dir: str = "", build: bool = True, instead: str = "") -> None:
    """Makes sure TFDS dataset `name` is prepared in `data_dir` (TFDS's default,
    ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``, when empty) before anything reads it:
    built here once when `build` (not by every worker and host at once), else refused in
    one line. A name TFDS does not know is one line too, and so is a download from a
    machine without a network (none of the dataset's download hosts resolves), at once
    rather than after TFDS's retries (minutes). `instead`: the caller's other way to the
    data, added to a refusal (``or set config.data_dir to GLUE's files``)."""
    builder = _unprepared(name, data_dir, build, instead)
    if builder is not None:
        print(f"building TFDS dataset {name} once into {builder.data_dir}", flush=True)
        builder.download_and_prepare()


def check_tfds(name: str, data_dir: str = "", instead: str = "") -> None:
    """`ensure_tfds`'s refusals, nothing built: for a job that reads the dataset later (an
    ablation table's fine-tuning, after hours of pre-training)."""
    _unprepared(name, data_dir, True, instead)


def _unprepared(name: str, data_dir: str, build: bool, instead: str):
    """The builder of a dataset to build here, None for one prepared; refused in one line
    (`ensure_tfds`)."""
    tfds = tensorflow_runtime.tensorflow_datasets()
    where = data_dir or "TFDS's data folder"
    try:
        builder = tfds.builder(name, data_dir=data_dir or None)
    except tfds.core.DatasetNotFoundError:
        known = f"not a name TFDS knows, nor prepared in {where}"
        raise ValueError(f"TFDS dataset {name!r} not found: {known}") from None
    if builder.is_prepared():
        return None
    instead = f", {instead}" if instead else ""
    if not build:
        raise ValueError(
            f"TFDS dataset {name!r} is not prepared in {where}, and several hosts would each build it: "
            f"build it once (`tfds build {name} --data_dir=DIR`) and read it from DIR, or from TFDS's "
            f"own prepared copies ({TFDS_PUBLIC_DATA_DIR}){instead}"
        )
    if host := _offline_host(builder):
        raise ValueError(
            f"TFDS dataset {name!r} is not prepared in {where} and cannot be downloaded here ({host} "
            f"does not resolve: no network?): build it where there is one (`tfds build {name} "
            f"--data_dir=DIR`) and read it from DIR{instead}"
        )
    return builder


_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _offline_host(builder) -> str | None:
    """One of the builder's download hosts when none of them resolves (no network here),
    else None; None too behind a proxy (which resolves them itself) or for a builder that
    lists no URLs."""
    if any(os.environ.get(k) for k in _PROXIES):
        return None
    try:
        urls = list(builder.url_infos or ())
    except Exception:  # a builder without checksums to read: nothing to check
        return None
    hosts = sorted({h for h in (urllib.parse.urlparse(u).hostname for u in urls) if h})
    for host in hosts:
        try:
            socket.getaddrinfo(host, 443)
            return None
        except OSError:
            continue
    return hosts[0] if hosts else None


def read_tfds(
    name: str,
    split: str = "train",
    text_key: str = "text",
    part: int = 0,
    parts: int = 1,
    data_dir: str = "",
) -> Iterator[Document]:
    """A prepared TFDS text dataset (e.g. ``wikipedia/20230601.en``; `ensure_tfds` first):
    each example one document; with ``parts`` > 1 only part ``part`` of
    ``tfds.even_splits(split, parts)``. `data_dir` as `ensure_tfds`'s."""
    tfds = tensorflow_runtime.tensorflow_datasets()

    if parts > 1:
        split = tfds.even_splits(split, n=parts)[part]
    replaced = 0
    examples = tfds.load(name, split=split, data_dir=data_dir or None, download=False, shuffle_files=False)
    for example in tfds.as_numpy(examples):
        text, bad = text_files.decode_counted(example[text_key])
        replaced += bad
        yield [s for p in text.split("\n") for s in split_sentences(p)]
    text_files.warn_replaced(f"TFDS {name} ({split})", replaced)


def load_documents(
    source: str, input_files: str = "", tfds_name: str = "", tfds_data_dir: str = "", shown: str = ""
) -> list[Document]:
    """All documents of a source with at least two sentences; skips are counted in a warning
    (naming `shown`, else the files or the source)."""
    if source == "wiki_excerpt":
        docs = read_wiki_dump(input_files or wiki_excerpt_path())
    elif source == "text":
        docs = read_text_files(input_files)
    elif source == "bbc_news":
        docs = read_bbc_news(input_files)
    elif source == "tfds":
        ensure_tfds(tfds_name, tfds_data_dir)
        docs = read_tfds(tfds_name, data_dir=tfds_data_dir)
    else:
        raise ValueError(f"unknown data source {source!r}: wiki_excerpt, bbc_news, text or tfds")
    # Named as prepare-data names an input: the files, or the TFDS dataset.
    shown = shown or (f"tfds:{tfds_name}" if source == "tfds" else input_files or source)
    kept = keep_usable(docs, shown)
    if not kept:
        raise ValueError(f"no usable documents (two or more sentences) in {source} {shown}")
    return kept
