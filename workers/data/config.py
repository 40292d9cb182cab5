"""`DataConfig`: where a corpus's text comes from, how it is split and tokenised, and where its cache goes."""

from __future__ import annotations

import os
from pathlib import Path

import pydantic

from .tokenizer import BYTES, normalised_spec

SHIPPED = "shipped"  # the source naming the corpus shipped with the package (`workers.data.documents`)


class DataConfig(pydantic.BaseModel):
    """Where the text comes from and how it is split; immutable, unknown keys rejected.

    ``source``: ``"shipped"``, a local file / directory path, or a hub dataset name (only
    then is the hub contacted).  ``hub_split``: the split loaded from the hub.
    ``text_field``: the column holding the text (json, parquet, hub; ``.txt`` files are
    read whole).  ``val_fraction``: in (0, 0.5], the share of documents (by hash) held out.
    ``split_seed``: salts the split hash.  ``tokenizer``: a `workers.data.tokenizer` spec (bytes,
    train:V, a tokenizer.json or a folder holding one, a hub name).  ``cache_dir``: where token
    shards, trained tokenizers and the ``datasets`` cache for local files go (default
    ``$RESNAS_CACHE`` or ``~/.cache/resnas``).
    """

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    source: str = pydantic.Field(SHIPPED, min_length=1)
    hub_split: str = pydantic.Field("train", min_length=1)
    text_field: str = pydantic.Field("text", min_length=1)
    val_fraction: float = pydantic.Field(0.05, gt=0.0, le=0.5)
    split_seed: int = 0
    tokenizer: str = BYTES
    cache_dir: str | None = None

    @pydantic.field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, spec: str) -> str:
        return normalised_spec(spec)

    def resolved_cache_dir(self) -> Path:
        """The cache directory this config uses (not created here)."""
        if self.cache_dir is not None:
            return Path(self.cache_dir).expanduser()
        env = os.environ.get("RESNAS_CACHE")
        return Path(env).expanduser() if env else Path.home() / ".cache" / "resnas"
