r"""Byte-level BPE encoding by distinct word: the same ids as the tokenizer's own encoding, each word encoded once.

Covered (`WordEncoder.applies`): a tokenizer with no normalizer and no post-processor, the ByteLevel
pre-tokenizer with GPT-2's regex and no prefix space, a BPE model without dropout, and added tokens that are
neither single-word nor stripped: what ``train:V`` builds, and a ``tokenizer.json`` of that shape. Any other
tokenizer (GPT-2's own ``tokenizer.json`` among them: it has a ByteLevel post-processor) is encoded by the
tokenizer itself (`HFTokenizer.encode`), and so is a list of documents that holds an added token's text (the
tokenizer splits those out before its regex) or meets a word hash collision (`EncodingFallback`).

Such a tokenizer splits text into words by the regex

    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+

and merges bytes within a word only, so a document's ids are its words' ids one after another. Natural text
repeats its words (the shipped corpus: 1.4M words, 36k distinct), so `WordEncoder` finds the words with array
operations, encodes each distinct word once with `tokenizers`' parallel batch encoding, and gathers.

The documents are joined by NUL characters; each joining NUL, known by its position, is a document boundary
(DOC): a word of its own whose id is the separator, two boundaries in a row (an empty document) included, and
no rule below looks across one, as the regex sees each document alone. A NUL inside a document is an ordinary
character.

Word boundaries, from each character's class (letter L, number N, whitespace W, other P: read from the
tokenizer's own regex engine for the characters present) by the regex's leftmost-first matching:

1. a boundary wherever the class changes;
2. a whitespace run followed by a non-whitespace character ends one character early (``\s+(?!\S)`` leaves the
   run's last character), and where that character is a space it starts the next word (`` ?\p{L}+``, ...);
3. an apostrophe that starts a word, followed by s, t, m, d, re, ve or ll, makes one word with those letters.

Distinct words are found by a 64-bit polynomial hash of their code points and then compared character by
character, so a collision is caught (`EncodingFallback`) rather than trusted. Bytes per token follow
`workers.data.tokenizer`: token i covers the bytes from the end of token i-1 to its own end, where a token that
ends inside a multi-byte character reaches that character's end (its character offset ends there).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

import numpy as np

L, N, P, W, DOC = 0, 1, 2, 3, 4  # character classes; DOC marks a document boundary (its separator)
_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible modulo 2^64
_INVERSE = np.uint64(pow(int(_BASE), -1, 1 << 64))
_CONTRACTIONS = "stmd"  # 's 't 'm 'd
_LONG_CONTRACTIONS = ("re", "ve", "ll")  # 're 've 'll
_CLASS_PATTERNS = ((L, r"\p{L}"), (N, r"\p{N}"), (W, r"\s"))


CHUNK_CHARS = 1 << 20  # characters encoded at once: the arrays over them stay in the CPU's caches


class EncodingFallback(Exception):
    """This text cannot be encoded by word here (an added token in it, a hash collision): use the tokenizer."""


class WordEncoder:
    """Encodes documents for one byte-level BPE ``tokenizers.Tokenizer`` (see `applies`), keeping every word
    it has encoded: ids per distinct word, as one flat array with offsets."""

    def __init__(self, tokenizer, separator: int):
        from tokenizers import Tokenizer

        spec = json.loads(tokenizer.to_str())
        spec["pre_tokenizer"] = {**spec["pre_tokenizer"], "use_regex": False}
        self.words_only = Tokenizer.from_str(json.dumps(spec))  # the same BPE on a word as given (no split)
        self.tokenizer, self.separator = tokenizer, separator
        self.added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        self.token_bytes = _byte_lengths(tokenizer, separator)
        self.classes: dict[int, int] = {0x20: W, 0x27: P}
        self.known: dict[str, int] = {}  # word -> its index into offsets; index 0 is the document boundary
        self.offsets = np.array([0, 1], dtype=np.int64)
        self.ids = np.array([separator], dtype=np.int64)

    @staticmethod
    def applies(tokenizer) -> bool:
        """True for a byte-level BPE whose words this module finds exactly (module docstring)."""
        spec = json.loads(tokenizer.to_str())
        pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
        return (
            spec.get("normalizer") is None
            and spec.get("post_processor") is None
            and pre.get("type") == "ByteLevel"
            and pre.get("add_prefix_space") is False
            and pre.get("use_regex", True) is True
            and model.get("type") == "BPE"
            and model.get("dropout") is None
            and not any(t.get("single_word") or t.get("lstrip") or t.get("rstrip") for t in spec["added_tokens"])
        )

    def encode(self, docs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, bytes per id) of the documents joined by the separator, as `HFTokenizer.encode` gives them.

        Raises `EncodingFallback` where this text cannot be encoded by word (a document holding an added
        token's text, or a hash collision)."""
        parts = [self._encode_joined(group) for group in _groups(docs, CHUNK_CHARS)]
        separator = (np.array([self.separator]), np.ones(1, dtype=np.uint16))
        joined = [piece for i, part in enumerate(parts) for piece in ([separator, part] if i else [part])]
        return np.concatenate([ids for ids, _ in joined]), np.concatenate([counts for _, counts in joined])

    def _encode_joined(self, docs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, bytes per id) of the documents joined by NUL characters, each joining NUL a document boundary
        (the separator) by its position, whatever the documents themselves hold."""
        text = "\x00".join(docs)
        if any(token in text for token in self.added):
            raise EncodingFallback("an added token in the text")
        if not text:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16)
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        cls = self._classes_of(points)
        doc_chars = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        cls[np.cumsum(doc_chars + 1)[:-1] - 1] = DOC  # the joining NULs, by position
        starts = word_starts(points, cls)
        ends = np.append(starts[1:], points.size)
        words = np.zeros(starts.size, dtype=np.int64)  # 0: a document boundary
        in_text = cls[starts] != DOC
        if in_text.any():
            words[in_text] = self._word_ids(points, starts[in_text], ends[in_text])
        lengths = np.diff(self.offsets)[words]
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        ids = self.ids[np.repeat(self.offsets[words], lengths) + within]
        return ids, _bytes_per_token(text.encode("utf-8"), self.token_bytes[ids])

    def _classes_of(self, points: np.ndarray) -> np.ndarray:
        """Each character's class, the classes of characters not seen before read from the tokenizer's engine."""
        present = np.flatnonzero(np.bincount(points, minlength=1))
        new = [int(c) for c in present if int(c) not in self.classes]
        if new:
            self.classes.update(zip(new, _engine_classes([chr(c) for c in new]), strict=True))
        table = np.full(int(present[-1]) + 1, P, dtype=np.uint8)
        table[present] = [self.classes[int(c)] for c in present]
        return table[points]

    def _word_ids(self, points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Each word's index into the encoded words, encoding the words not seen before."""
        first, inverse = _distinct(points, starts, ends)
        texts = _texts(points, starts[first], ends[first])
        known = self.known
        index = np.array([known.get(t, -1) for t in texts], dtype=np.int64)
        missing = np.flatnonzero(index < 0)
        if missing.size:
            new = [texts[i] for i in missing]
            encoded = [e.ids for e in self.words_only.encode_batch_fast(new, add_special_tokens=False)]
            index[missing] = np.arange(len(new)) + (self.offsets.size - 1)
            self.known.update(zip(new, index[missing].tolist(), strict=True))
            self._append(encoded)
        return index[inverse]

    def _append(self, encoded: list[list[int]]) -> None:
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        flat = np.fromiter((i for ids in encoded for i in ids), dtype=np.int64, count=int(lengths.sum()))
        self.offsets = np.concatenate([self.offsets, self.offsets[-1] + np.cumsum(lengths)])
        self.ids = np.concatenate([self.ids, flat])


def word_starts(points: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Sorted start positions of the words of a text (its code points and their classes), rules 1-3 of the
    module docstring; a DOC character is a word of its own, and no rule looks across it."""
    n = points.size
    start = np.zeros(n + 1, dtype=bool)
    start[0] = True
    start[1:n] = cls[1:] != cls[:-1]  # rule 1
    boundary = np.flatnonzero(cls == DOC)
    start[boundary] = start[boundary + 1] = True  # one word per boundary, two boundaries in a row included
    after_run = np.flatnonzero((cls[:-1] == W) & (cls[1:] <= P)) + 1  # p: a W run ends at p - 1, a word starts
    start[after_run - 1] = True  # rule 2: the run's last character starts a word
    start[after_run[points[after_run - 1] == 0x20]] = False  # ... a space joins the word after it
    apostrophe = np.flatnonzero((points[:-1] == 0x27) & start[: n - 1])  # rule 3, where an apostrophe starts a word
    length = _contraction_lengths(points, apostrophe)
    start[apostrophe[length > 0] + 1] = False
    start[np.minimum(apostrophe + length, n)[length > 0]] = True
    start[n] = False
    return np.flatnonzero(start)


def _contraction_lengths(points: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Length of the contraction ('s, 're, ...) starting at each apostrophe position in `at` (not the last
    character), 0 where none starts."""
    first = points[at + 1]
    second = np.append(points, 0)[at + 2]
    long = np.zeros(at.size, dtype=bool)
    for pair in _LONG_CONTRACTIONS:
        long |= (first == ord(pair[0])) & (second == ord(pair[1]))
    short = np.isin(first, [ord(c) for c in _CONTRACTIONS])
    return np.where(long, 3, np.where(short, 2, 0))


def _engine_classes(chars: list[str]) -> list[int]:
    """The class of each character as the tokenizer's regex engine (Oniguruma) reads \\p{L}, \\p{N} and \\s."""
    from tokenizers import Regex, pre_tokenizers

    text = "".join(chars)
    classes = [P] * len(chars)
    for cls, pattern in reversed(_CLASS_PATTERNS):  # classes are disjoint: the order only fixes precedence
        kept = np.zeros(len(chars), dtype=bool)
        for _, (start, end) in pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text):
            kept[start:end] = True
        for i in np.flatnonzero(~kept):
            classes[i] = cls
    return classes


def _texts(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """The words [starts, ends) of a text's code points as strings: one decode, then slices."""
    widths = ends - starts
    joined = points[np.repeat(starts - np.cumsum(widths) + widths, widths) + np.arange(int(widths.sum()))]
    text = joined.tobytes().decode("utf-32-le")
    cuts = np.cumsum(widths).tolist()
    return [text[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True)]


def _groups(docs: Sequence[str], chars: int) -> list[Sequence[str]]:
    """Consecutive groups of documents of about `chars` characters each (a longer document alone)."""
    groups, start, size = [], 0, 0
    for i, doc in enumerate(docs):
        if size and size + len(doc) > chars:
            groups.append(docs[start:i])
            start, size = i, 0
        size += len(doc) + 1
    groups.append(docs[start:])
    return groups


@functools.lru_cache(maxsize=4)
def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(B^1 .. B^n, B^0 .. B^-n) modulo 2^64."""
    powers = np.cumprod(np.full(n, _BASE, dtype=np.uint64))
    inverse = np.concatenate([[np.uint64(1)], np.cumprod(np.full(n, _INVERSE, dtype=np.uint64))])
    return powers, inverse


def _distinct(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first word of each distinct word, each word's distinct index): by hash, then checked in full."""
    powers, inverse_powers = _powers(max(CHUNK_CHARS, 1 << int(points.size).bit_length()))
    prefix = np.zeros(points.size + 1, dtype=np.uint64)
    np.cumsum(points * powers[: points.size], out=prefix[1:])  # sum c_t B^(t+1)
    lengths = (ends - starts).astype(np.uint64)
    key = (prefix[ends] - prefix[starts]) * inverse_powers[starts] ^ (lengths * np.uint64(0xD6E8FEB86659FD93))
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rep = first[inverse]
    width = ends - starts
    if not np.array_equal(width, width[rep]):
        raise EncodingFallback("a word hash collision")
    offset = np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width, width)
    if not np.array_equal(points[np.repeat(starts, width) + offset], points[np.repeat(starts[rep], width) + offset]):
        raise EncodingFallback("a word hash collision")
    return first, inverse


def _byte_lengths(tokenizer, separator: int) -> np.ndarray:
    """Bytes of text each id spells: one per character of a byte-level token, one for the separator."""
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    lengths = np.ones(max(max(vocab.values()), separator) + 1, dtype=np.int64)
    for token, i in vocab.items():
        lengths[i] = len(token)
    lengths[separator] = 1  # it stands for the NUL between two documents
    return lengths


def _bytes_per_token(text: bytes, spelled: np.ndarray) -> np.ndarray:
    """Bytes each token covers: its end (the sum of the bytes spelled so far) moved to the end of the character
    it falls in, minus the previous token's."""
    ends = np.cumsum(spelled)
    if ends.size and ends[-1] != len(text):
        raise EncodingFallback("the tokens do not spell the text")
    data = np.frombuffer(text, dtype=np.uint8)
    boundary = np.append((data & 0xC0) != 0x80, True)  # a character starts here, or the text ends
    inside = np.flatnonzero(~boundary[ends])
    if inside.size:
        ends[inside] = np.flatnonzero(boundary)[np.searchsorted(np.flatnonzero(boundary), ends[inside])]
    return np.diff(ends, prepend=0).astype(np.uint16)
