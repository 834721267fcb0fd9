"""A multilingual real-text JSONL corpus from what a Debian machine has installed, for checking the fast
engines against `tokenizers` beyond English (`bench_layouts.py --corpus`):

- translated man pages (/usr/share/man/<lang>/, 25 languages: de, fr, ja, ko, pl, ru, uk, zh_CN, ...);
- the Linux kernel documentation's translations (zh_CN, zh_TW, ja_JP, ko_KR, it_IT; rst and html;
  `apt-get install -y linux-doc-6.1`);
- vim's message catalogues and help, and glibc's locale definitions (/usr/share/i18n/locales).

Every distinct (sha1) file of 200 characters or more that decodes as UTF-8 (gzip undone) is one
document, shuffled with a fixed seed. On the bench machine: 2,495 documents, 47.3 MB of JSONL, 4.7%
of the characters outside ASCII (CJK, Cyrillic, Greek, accented Latin, Hangul, kana), amid groff
and reST markup.

    python benchmarks/build_multilingual_corpus.py benchmarks/data/multilingual.jsonl
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import random

KERNEL_DOCS = "/usr/share/doc/linux-doc-6.1"


def roots() -> list[str]:
    found = [d for d in sorted(glob.glob("/usr/share/man/*")) if not os.path.basename(d).startswith("man")]
    for sub in ("Documentation/translations", "html/translations", "html/_sources/translations"):
        found += sorted(glob.glob(f"{KERNEL_DOCS}/{sub}/*"))
    return found + ["/usr/share/vim/vim90/lang", "/usr/share/i18n/locales", "/usr/share/vim/vim90/doc"]


def documents(min_chars: int = 200) -> list[str]:
    seen: set[bytes] = set()
    docs: list[str] = []
    for root in roots():
        for dirpath, _, names in sorted(os.walk(root)):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                    if data[:2] == b"\x1f\x8b":
                        data = gzip.decompress(data)
                    text = data.decode("utf-8")
                except (OSError, EOFError, ValueError):  # unreadable, damaged .gz, not UTF-8
                    continue
                digest = hashlib.sha1(data).digest()
                if len(text) >= min_chars and digest not in seen:
                    seen.add(digest)
                    docs.append(text)
    random.Random(0).shuffle(docs)
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the JSONL file to write ({'text': ...} per line)")
    args = ap.parse_args()
    docs = documents()
    if len(docs) < 100:
        raise SystemExit(f"only {len(docs)} documents found; apt-get install -y linux-doc-6.1 manpages-de ...")
    with open(args.out, "w", encoding="utf-8") as f:
        for text in docs:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    chars = sum(map(len, docs))
    wide = sum(sum(1 for c in t if ord(c) > 127) for t in docs)
    print(f"{args.out}: {len(docs):,} documents, {os.path.getsize(args.out) / 1e6:.1f} MB, "
          f"{wide / chars:.1%} of characters outside ASCII")


if __name__ == "__main__":
    main()
