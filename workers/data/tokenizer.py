"""The tokenisers a search trains with, named by one spec string (`nas search --tokenizer`):

* ``bytes``: UTF-8 bytes, vocabulary 256, documents joined by the NUL byte (the default);
* ``train:V``: a byte-level BPE of V tokens (257 <= V <= 524,288) trained with Hugging Face
  ``tokenizers`` on the corpus's training split, deterministic and cached, so a realistic
  vocabulary needs no download;
* a ``tokenizer.json`` file of Hugging Face ``tokenizers``, or a folder holding one;
* any other string: a hub name, fetched with ``tokenizers.Tokenizer.from_pretrained`` (the hub is
  contacted only then).

Every tokeniser has ``vocab_size`` (ids 0..V-1), ``separator`` (the id between two documents)
and ``identity``: ``"bytes"``, or the sha256 of the tokenizer's canonical serialisation
(``tokenizers.Tokenizer.to_str()``), which the corpus cache key, the stored search and an exported
config carry.  A file tokenizer without an end-of-text token (one of `SEPARATOR_TOKENS`) gets the
separator id V appended, so its vocabulary is V + 1.

``encode`` returns, beside the ids, how many UTF-8 bytes of text each id covers: token i covers
the bytes from the end of token i-1's text (by the tokenizer's character offsets) to the end of
its own, the last token of a document reaches the document's end, and a separator covers one
byte (the NUL byte it stands for under ``bytes``).  Summed over any span of the stream that is
the exact byte count of the text it spans, so bits per byte are exact and comparable across
tokenisers: bpb = nats / (ln 2 x bytes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .word_encoding import EncodingFallback, WordEncoder

log = logging.getLogger(__name__)

BYTES = "bytes"
BYTES_SEPARATOR = 0
MIN_TRAINED_VOCAB = 257  # the 256 byte symbols of byte-level BPE plus the separator
MAX_TRAINED_VOCAB = 524_288
SEPARATOR_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>")
TRAINED_SEPARATOR = "<|endoftext|>"
_TRAIN = re.compile(r"train:(.*)")


class TokenizerError(ValueError):
    """A tokenizer spec or file that cannot be used; the message is one line naming --tokenizer."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned integer that holds ids 0..vocab_size-1 (uint8 for bytes)."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise TokenizerError(f"--tokenizer: a vocabulary of {vocab_size} tokens does not fit in uint32")


def trained_vocab(spec: str) -> int | None:
    """V of a ``train:V`` spec (checked: 257 <= V <= 524,288), or None for any other spec."""
    match = _TRAIN.fullmatch(spec.strip())
    if match is None:
        return None
    try:
        vocab = int(match.group(1))
    except ValueError:
        raise TokenizerError(f"--tokenizer: train:V needs an integer V, got {match.group(1)!r}") from None
    if not MIN_TRAINED_VOCAB <= vocab <= MAX_TRAINED_VOCAB:
        raise TokenizerError(
            f"--tokenizer: train:V must have {MIN_TRAINED_VOCAB} <= V <= {MAX_TRAINED_VOCAB:,} "
            f"(256 byte symbols plus a separator at least), got {vocab}"
        )
    return vocab


def tokenizer_file(spec: str) -> Path | None:
    """The ``tokenizer.json`` a spec names (a file, or a folder holding one), or None for a hub name.

    A spec that looks like a path (starts with / . ~ or ends in .json) but names nothing is an error.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise TokenizerError(f"--tokenizer: folder {spec!r} holds no tokenizer.json")
        return (path / "tokenizer.json").resolve()
    if path.is_file():
        return path.resolve()
    if spec.startswith(("/", ".", "~")) or spec.endswith(".json"):
        raise TokenizerError(
            f"--tokenizer: no such file or folder {spec!r} (bytes, train:V, a tokenizer.json or a hub name)"
        )
    return None


def normalised_spec(spec: str) -> str:
    """The spec as stored with a search: checked, with a file spec made absolute.

    Cheap: a file is not parsed here and the hub is not contacted (`load_tokenizer` does that).
    """
    spec = spec.strip()
    if not spec:
        raise TokenizerError("--tokenizer: must be bytes, train:V, a tokenizer.json file or a hub name")
    if spec == BYTES or trained_vocab(spec) is not None:
        return spec
    path = tokenizer_file(spec)
    return str(path) if path is not None else spec


class ByteTokenizer:
    """UTF-8 bytes: one id per byte, documents joined by NUL (removed from the text beforehand)."""

    vocab_size = 256
    separator = BYTES_SEPARATOR
    identity = BYTES
    spec = BYTES

    def encode(self, docs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, bytes per id) of the documents joined by the separator."""
        data = bytes([BYTES_SEPARATOR]).join(d.encode("utf-8") for d in docs)
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
        return ids, np.ones(ids.size, dtype=np.uint16)

    def decode(self, ids: np.ndarray) -> list[str]:
        """The documents of a stream (split at the separator)."""
        data = np.asarray(ids, dtype=np.uint8).tobytes()
        return [part.decode("utf-8", errors="replace") for part in data.split(bytes([BYTES_SEPARATOR]))] if data else []

    def token_bytes(self) -> np.ndarray:
        """Bytes of text each id stands for (all ones)."""
        return np.ones(self.vocab_size, dtype=np.uint16)


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer`` with a document separator (see the module docstring)."""

    def __init__(self, tokenizer, spec: str):
        self.tokenizer, self.spec = tokenizer, spec
        serialised = tokenizer.to_str()
        self.identity = "sha256:" + hashlib.sha256(serialised.encode("utf-8")).hexdigest()
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        found = next((t for t in SEPARATOR_TOKENS if tokenizer.token_to_id(t) is not None), None)
        self.separator = tokenizer.token_to_id(found) if found is not None else size
        self.vocab_size = size if found is not None else size + 1
        if found is None:
            log.info("tokenizer %s has no end-of-text token: id %d separates documents", spec, self.separator)
        self.words = WordEncoder(tokenizer, self.separator) if WordEncoder.applies(tokenizer) else None

    def to_str(self) -> str:
        return self.tokenizer.to_str()

    def encode(self, docs: Sequence[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """(ids, bytes per id) of the documents joined by the separator, each document encoded alone by the
        tokenizer: by distinct word where `WordEncoder.applies` (`word_encoding`: the same ids and bytes), else,
        and for a list it cannot encode by word, by the tokenizer itself, batches of documents in parallel."""
        if self.words is not None:
            try:
                return self.words.encode(docs)
            except EncodingFallback as why:
                log.debug("encoding %d documents with the tokenizer itself: %s", len(docs), why)
        ids: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        for start in range(0, len(docs), batch_size):
            batch = list(docs[start : start + batch_size])
            for doc, enc in zip(batch, self.tokenizer.encode_batch(batch, add_special_tokens=False), strict=True):
                if ids:
                    ids.append(np.array([self.separator], dtype=np.int64))
                    counts.append(np.ones(1, dtype=np.int64))
                ids.append(np.asarray(enc.ids, dtype=np.int64))
                counts.append(_bytes_per_token(doc, enc.offsets))
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16)
        count = np.concatenate(counts)
        if count.size and count.max() > np.iinfo(np.uint16).max:
            raise TokenizerError(f"--tokenizer: a token of {int(count.max())} bytes (at most 65,535 are supported)")
        return np.concatenate(ids), count.astype(np.uint16)

    def decode(self, ids: np.ndarray) -> list[str]:
        """The documents of a stream (split at the separator)."""
        ids = np.asarray(ids, dtype=np.int64)
        cuts = np.flatnonzero(ids == self.separator)
        parts = np.split(ids, cuts)
        parts = [parts[0]] + [p[1:] for p in parts[1:]]
        return [self.tokenizer.decode(p.tolist(), skip_special_tokens=False) for p in parts] if ids.size else []

    def token_bytes(self) -> np.ndarray:
        """Bytes of text each id stands for: exact for a byte-level vocabulary (one character of a token
        is one byte), else the UTF-8 length of the id decoded alone; the separator counts one byte."""
        byte_level = (json.loads(self.tokenizer.to_str()).get("decoder") or {}).get("type") == "ByteLevel"
        special = {t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special}
        lengths = np.ones(self.vocab_size, dtype=np.uint16)
        for i in range(self.tokenizer.get_vocab_size(with_added_tokens=True)):
            token = self.tokenizer.id_to_token(i)
            if i == self.separator or token is None or token in special:
                continue
            text = token if byte_level else self.tokenizer.decode([i], skip_special_tokens=False)
            lengths[i] = len(text) if byte_level else len(text.encode("utf-8"))
        return lengths


def _bytes_per_token(text: str, offsets: Sequence[tuple[int, int]]) -> np.ndarray:
    """UTF-8 bytes each token covers: from the previous token's end to its own (module docstring)."""
    if not offsets:
        if text:
            log.warning("a document of %d characters encoded to no tokens: its bytes are not counted", len(text))
        return np.zeros(0, dtype=np.int64)
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    char_bytes = 1 + (codepoints >= 0x80).astype(np.int64) + (codepoints >= 0x800) + (codepoints >= 0x10000)
    byte_at_char = np.concatenate([[0], np.cumsum(char_bytes)])
    ends = np.maximum.accumulate(byte_at_char[np.asarray([end for _, end in offsets], dtype=np.int64)])
    ends[-1] = byte_at_char[-1]
    return np.diff(ends, prepend=0)


def train_bpe(docs: Sequence[str], vocab_size: int):
    """A byte-level BPE of ``vocab_size`` tokens (the separator `TRAINED_SEPARATOR` is id 0) trained
    on ``docs``; deterministic: the same documents in the same order give the same tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[TRAINED_SEPARATOR],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(docs, trainer=trainer, length=len(docs))
    if tokenizer.get_vocab_size() < vocab_size:
        log.warning("train:%d: the training text supports only %d tokens", vocab_size, tokenizer.get_vocab_size())
    return tokenizer


def _read_file(path: Path):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on malformed JSON
        raise TokenizerError(f"--tokenizer: {path} is not a tokenizers JSON file ({err})") from None


def load_tokenizer(spec: str, train_docs: Callable[[], Sequence[str]], cache_dir: Path) -> ByteTokenizer | HFTokenizer:
    """The tokeniser of a spec.  ``train_docs`` gives the training split (called only for ``train:V``
    on a cache miss); a trained BPE is cached in ``cache_dir`` under a key of the spec and the corpus."""
    spec = normalised_spec(spec)
    if spec == BYTES:
        return ByteTokenizer()
    vocab = trained_vocab(spec)
    if vocab is not None:
        cached = cache_dir / "tokenizer.json"
        if cached.is_file():
            return HFTokenizer(_read_file(cached), spec)
        tokenizer = train_bpe(train_docs(), vocab)
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".tokenizer.json.{id(tokenizer)}.tmp"
        tmp.write_text(tokenizer.to_str(), encoding="utf-8")
        tmp.replace(cached)
        return HFTokenizer(tokenizer, spec)
    path = tokenizer_file(spec)
    if path is not None:
        return HFTokenizer(_read_file(path), spec)
    from tokenizers import Tokenizer

    log.info("fetching tokenizer %s from the hub", spec)
    try:
        return HFTokenizer(Tokenizer.from_pretrained(spec), spec)
    except Exception as err:
        raise TokenizerError(
            f"--tokenizer: cannot fetch {spec!r} from the hub ({' '.join(str(err).split())[:200]})"
        ) from None
