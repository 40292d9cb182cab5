"""The third corpus of `make fidelity`: technical prose in four languages other than English.

    python -m benchmarks.corpora.handbook_corpus      # writes benchmarks/data/debian_handbook.jsonl.gz

The Debian Administrator's Handbook (Raphaël Hertzog and Roland Mas; GPL-2.0+ or CC-BY-SA-3.0, Debian package
`debian-handbook`) in its German, French, Spanish and Italian translations: one JSON record {"title", "text"}
per chapter page and language, the text of the page's HTML with its navigation dropped. A corpus chosen after
every method of the project was chosen on the plays and the Python source, so that it can be held out: prose
(unlike the code), technical (unlike the plays), in languages neither holds. The package is fetched with
`apt-get download` (or given as `--deb`); which version made the file is written into the NOTICE.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: its data/ and results/
OUT = HERE / "data" / "debian_handbook.jsonl.gz"
LANGUAGES = ("de-DE", "fr-FR", "es-ES", "it-IT")
BLOCKS = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "pre", "tr", "dt", "dd", "table", "title"}
SKIPPED = {"script", "style", "head"}
MIN_CHARS = 2000  # index and legal-notice pages hold little prose


class _Text(HTMLParser):
    """The text of a page, a newline at each block element, nothing inside <head>, scripts or styles, nor
    inside the navigation bars (`div class="navheader|navfooter"`, `ul class="docnav"`)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip_depth = 0  # > 0 inside a skipped element: the depth of open tags below its start
        self.open_tags: list[bool] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        skipped = tag in SKIPPED or bool({"navheader", "navfooter", "docnav", "breadcrumbs"} & set(classes))
        if tag in {"br", "img", "meta", "link", "hr", "input"}:  # void elements: no end tag to match
            if tag == "br" and not self.skip_depth:
                self.parts.append("\n")
            return
        self.open_tags.append(skipped)
        if skipped:
            self.skip_depth += 1
        if tag in BLOCKS and not self.skip_depth:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in {"br", "img", "meta", "link", "hr", "input"} or not self.open_tags:
            return
        if self.open_tags.pop():
            self.skip_depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            self.parts.append(data)

    def text(self) -> str:
        text = "".join(self.parts).replace("\xa0", " ")
        text = "\n".join(line.strip() for line in text.splitlines())
        return re.sub(r"\n{3,}", "\n\n", text).strip()


def page_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return parser.text()


def pages(html_root: Path) -> list[tuple[str, str]]:
    """(language/page, text) of every chapter page of each of LANGUAGES, in language then page order."""
    chosen = []
    for language in LANGUAGES:
        for path in sorted((html_root / language).glob("*.html")):
            text = page_text(path.read_text(encoding="utf-8"))
            if len(text) >= MIN_CHARS:
                chosen.append((f"{language}/{path.stem}", text))
    return chosen


def _unpacked(deb: Path, into: Path) -> Path:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    return into / "usr" / "share" / "doc" / "debian-handbook" / "html"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--deb", type=Path, help="the debian-handbook package (default: apt-get download it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb
        if deb is None:
            subprocess.run(["apt-get", "download", "debian-handbook"], cwd=tmp, check=True, capture_output=True)
            deb = next(Path(tmp).glob("debian-handbook_*.deb"))
        version = deb.name.removeprefix("debian-handbook_").split("_")[0]
        chosen = pages(_unpacked(deb, Path(tmp) / "unpacked"))
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as f:
        for title, text in chosen:
            f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
    size = sum(len(t.encode()) for _, t in chosen)
    notice = (
        f"{args.out.name}: {len(chosen)} chapter pages of The Debian Administrator's Handbook (Debian package\n"
        f"debian-handbook {version}) in {', '.join(LANGUAGES)} ({size / 1e6:.2f} MB of UTF-8 text), one JSON record\n"
        '{"title", "text"} per page and language, the pages\' text with their navigation dropped, chosen by\n'
        "benchmarks/corpora/handbook_corpus.py. Copyright 2003-2015 Raphaël Hertzog, Roland Mas, 2013-2015\n"
        "Freexian SARL, and the translators. Distributed under the GNU General Public License version 2 or later,\n"
        "or the Creative Commons Attribution-ShareAlike 3.0 Unported License, at your option.\n"
    )
    notice_path = args.out.parent / "NOTICE"
    kept = [block for block in notice_path.read_text().split("\n\n") if not block.startswith(args.out.name)]
    notice_path.write_text("\n\n".join([*(b.strip("\n") for b in kept if b.strip()), notice.strip("\n")]) + "\n")
    print(notice, end="")


if __name__ == "__main__":
    main()
