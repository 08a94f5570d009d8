#!/usr/bin/env python3
"""The docs stand alone: every relative link and every repository path that
README.md, docs/, images/README.md, sdk/*/README.md and the web pages name
must exist in this repository, and none of them may point outside it.

    scripts/check-docs.py            (run by `make lint`)

What counts as a path: a word that starts with one of the repository's
top-level folders and a slash (`docs/pool.md`, `sandbox/pool.c:42`,
`tests/integration/test_*.c`), a relative Markdown link, and a bare `*.md`
name. Build output (build/, bin/, node_modules/, ...) is made by `make`
and is not checked. Paths of a developer's machine (/work/...,
../shared/) are refused outright; system paths such as
/var/lib/sandboxd are the daemon's and are not checked.
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
os.chdir(ROOT)

TRACKED = set(subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split("\n")) - {""}
# Files added in this change but not yet committed count too.
TRACKED |= set(subprocess.run(["git", "ls-files", "--others", "--exclude-standard"],
                              capture_output=True, text=True, check=True).stdout.split("\n")) - {""}
DIRS = set()
for f in TRACKED:
    parts = f.split("/")
    for i in range(1, len(parts)):
        DIRS.add("/".join(parts[:i]))
TOP = sorted({f.split("/")[0] for f in TRACKED if "/" in f} - {".ci", ".github"})
GENERATED = ("build/", "bin/", "build-asan/", "build-tsan/", "node_modules/", "tests/.record/")
MACHINE = re.compile(r"(?<![\w.])/work/[\w./-]*|\.\./shared/[\w./-]*")

PATH_RE = re.compile(r"(?<![\w./$-])((?:%s)/[\w.*{}\[\]/-]*[\w*}])" % "|".join(map(re.escape, TOP)))
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
MD_RE = re.compile(r"(?<![\w./-])([\w-]+\.md)\b")


def exists(path):
    path = path.rstrip("/")
    if path in TRACKED or path in DIRS or path + ".c" in TRACKED:
        return True  # (bench/exec names the program built from bench/exec.c)
    if any(c in path for c in "*?[{"):
        pat = re.sub(r"\{[^}]*\}", "*", path)
        return any(glob.fnmatch.fnmatch(f, pat) for f in TRACKED)
    return False


def docs():
    out = ["README.md", "images/README.md"]
    out += sorted(glob.glob("docs/*.md")) + sorted(glob.glob("sdk/*/README.md"))
    out += sorted(glob.glob("web/*.html"))
    return [f for f in out if os.path.exists(f)]


def check(fname):
    bad = []
    text = open(fname, encoding="utf-8").read()
    base = os.path.dirname(fname)
    for n, line in enumerate(text.split("\n"), 1):
        for m in MACHINE.finditer(line):
            bad.append((n, m.group(0), "a path of one machine, outside the repository"))
        for m in LINK_RE.finditer(line):
            target = m.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue
            rel = os.path.normpath(os.path.join(base, target))
            if rel.startswith(".."):
                bad.append((n, target, "a link outside the repository"))
            elif not exists(rel):
                bad.append((n, target, "a link to a file not in the repository"))
        for m in PATH_RE.finditer(line):
            p = re.sub(r":\d+(?:-\d+)?$", "", m.group(1)).rstrip(".")
            if p.startswith(GENERATED) or exists(p):
                continue
            bad.append((n, p, "a path not in the repository"))
        for m in MD_RE.finditer(line):
            name = m.group(1)
            if exists(os.path.normpath(os.path.join(base, name))) or exists(name):
                continue
            if any(f.endswith("/" + name) for f in TRACKED):
                continue
            bad.append((n, name, "a document not in the repository"))
    return [(fname, n, what, why) for n, what, why in bad]


def error_table():
    """docs/api.md's table of error types equals util/util.h's list."""
    code = set(re.findall(r'X\(SBX_E_\w+,\s*(\d+),\s*"(\w+)"\)', open("util/util.h").read()))
    doc = set()
    for line in open("docs/api.md", encoding="utf-8"):
        m = re.match(r"\s*\| (\d{3}) \| (`\w+`(?:, `\w+`)*) \|", line)
        if m:
            doc |= {(m.group(1), t) for t in re.findall(r"`(\w+)`", m.group(2))}
    bad = [("docs/api.md", 0, f"{s} {t}", "an error type of util/util.h missing from the table")
           for s, t in sorted(code - doc)]
    bad += [("docs/api.md", 0, f"{s} {t}", "an error type in the table that the code never sends")
            for s, t in sorted(doc - code)]
    return bad


def main():
    bad = error_table()
    for f in docs():
        bad += check(f)
    for fname, n, what, why in bad:
        print(f"check-docs: {fname}:{n}: '{what}': {why}")
    if bad:
        print(f"check-docs: {len(bad)} broken reference(s)")
        return 1
    print(f"check-docs: {len(docs())} documents, every path and link is in the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
