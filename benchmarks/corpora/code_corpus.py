"""The second corpus of `make fidelity`: Python source code, a text of another kind than the shipped plays.

    python -m benchmarks.corpora.code_corpus      # writes benchmarks/data/python_stdlib.jsonl.gz from this Python

Modules of the Python standard library (Python Software Foundation License, kept beside the file as
benchmarks/data/PYTHON_LICENSE.txt), one JSON record {"title", "text"} per module, chosen so that the
corpus is about as large as the plays: every `.py` file of the library outside tests, site-packages and
generated tables (over `MAX_FILE_BYTES`), taken in path order while the blake2b hash of its path falls
below `KEEP_SHARE`. The record of which interpreter made it is written into the NOTICE.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "data" / "python_stdlib.jsonl.gz"
KEEP_SHARE = 0.42  # of the library's eligible modules, by path hash: about 5 MB of source
MAX_FILE_BYTES = 200_000  # larger modules are generated tables (pydoc topics, unicode data)
SKIP_PARTS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


def _kept(relative: str) -> bool:
    digest = hashlib.blake2b(relative.encode(), digest_size=8, person=b"resnas-code").digest()
    return int.from_bytes(digest, "big") / 2.0**64 < KEEP_SHARE


def modules(library: Path) -> list[tuple[str, str]]:
    """(path relative to the library, source) of each chosen module, in path order."""
    chosen = []
    for path in sorted(library.rglob("*.py")):
        relative = path.relative_to(library).as_posix()
        if SKIP_PARTS & set(Path(relative).parts) or relative.startswith("config-"):
            continue
        if path.stat().st_size > MAX_FILE_BYTES or not _kept(relative):
            continue
        try:
            chosen.append((relative, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    library = Path(sysconfig.get_paths()["stdlib"])
    chosen = modules(library)
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as f:
        for title, text in chosen:
            f.write(json.dumps({"title": title, "text": text}) + "\n")
    shutil.copyfile(library / "LICENSE.txt", args.out.parent / "PYTHON_LICENSE.txt")
    size = sum(len(t.encode()) for _, t in chosen)
    notice = (
        f"{args.out.name}: {len(chosen)} modules of the Python {sys.version.split()[0]} standard library "
        f'({size / 1e6:.2f} MB of source), one JSON record {{"title", "text"}} per module, texts unchanged,\n'
        "chosen by benchmarks/corpora/code_corpus.py. Copyright (c) 2001-2023 Python Software Foundation; All Rights\n"
        "Reserved. Distributed under the Python Software Foundation License Version 2, whose text is in\n"
        "PYTHON_LICENSE.txt beside this file.\n"
    )
    (args.out.parent / "NOTICE").write_text(notice)
    print(notice, end="")


if __name__ == "__main__":
    main()
