#!/usr/bin/env python3
"""Fails when a document names a path of this repository that does not exist, so the map in docs/ stays true as
files move. Reads README.md, docs/*.md and tests/*/README.md (or the files given after ROOT); a path is a `backticked` word that starts
with one of the repository's top folders, or such a path written bare. Brace lists (`x.{hpp,cpp}`), globs (`x.*`, `*_shm.cpp`) and a trailing
`:LINE` or `::symbol` are understood. Usage: check_doc_paths.py [ROOT [FILE...]]; exit 1 with file:line of each
stale path.
"""
import glob
import os
import re
import sys

TOPS = ("agent", "apps", "cmake", "comm", "common", "configs", "docs", "examples", "rendezvous", "scripts", "store",
        "tests", ".ci")
TICKED = re.compile(r"`([^`\s]+)`")
# A path written without backticks: a top folder after a space or an opening bracket.
BARE = re.compile(r"(?<![\w/.`-])((?:%s)/[\w./*{},-]+)" % "|".join(re.escape(t) for t in TOPS))


def expand(word):
    """Every path a word names: x.{hpp,cpp} -> x.hpp, x.cpp (nested braces are not used in the docs)."""
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [p for alt in m.group(1).split(",") for p in expand(word[:m.start()] + alt + word[m.end():])]


def candidate(word):
    word = re.sub(r"(::[A-Za-z_].*|:\d.*)$", "", word).rstrip(".,;:)")
    if "/" not in word or not word.startswith(tuple(t + "/" for t in TOPS)):
        return None
    return word


def exists(root, path):
    full = os.path.join(root, path)
    if any(c in path for c in "*?["):
        return bool(glob.glob(full))
    if path.endswith("/"):
        return os.path.isdir(full)
    # A module named without its extension (`common/log`) stands for its files.
    return os.path.exists(full) or (not os.path.splitext(path)[1] and bool(glob.glob(full + ".*")))


def stale(root, doc):
    out = []
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            for m in list(TICKED.finditer(line)) + list(BARE.finditer(line)):
                word = candidate(m.group(1))
                if word is None:
                    continue
                for path in expand(word):
                    if not exists(root, path):
                        out.append(f"{doc}:{number}: `{m.group(1)}` names {path}, which does not exist")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    docs = sys.argv[2:] or sorted(
        os.path.relpath(p, root) for pattern in ("README.md", "docs/*.md", "tests/*/README.md")
        for p in glob.glob(os.path.join(root, pattern)))
    errors = [e for doc in docs for e in stale(root, doc)]
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} stale path(s): point the document at where the file lives now")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
