#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""No doc names code that does not exist.

Usage: scripts/check_docs.py [ROOT]      (ROOT: the repository, default: this script's parent)
Registered as the ctest `lint.docs`; it needs python3 and the source tree only, no build.

Which docs: README.md, HACKING.md and docs/**/*.md, except docs/history/ (the dated history keeps
the names and commands of its day, as written then) and docs/data/ (raw benchmark output).

Which text: inline code spans (`...`, any number of backticks; a span may wrap lines inside a
paragraph). Fenced code blocks (``` or ~~~) are skipped: they are commands and examples.

Each span is trimmed of surrounding whitespace, then:

1. A span with whitespace, `=`, `$`, `|`, quotes or a leading `-` is a command or a snippet.
   Leading NAME=VALUE words are dropped; if the first remaining word looks like a path of the
   repository (rule 2), that word is checked as one; the rest of the span is not checked.
   (Whitespace inside template arguments `<...>` and parentheses does not count: `path<N, R, T>`
   and `f(a, b)` are names, rule 3.)
2. A path: the span (with a trailing `:LINE`, `,`, `.`, `;` or `:` removed, `<...>` around an
   include removed) contains `/`, is not absolute (`/dev/shm`), not a URL (`://`), and either
   starts with src/ include/ tests/ scripts/ bench/ docs/ examples/ bindings/ fuzz/ cmake/ .ci/
   build/, or ends in a source or doc extension (.cpp .hpp .ipp .h .c .cu .py .sh .md .cmake
   .txt .json .go .js .patch .map .toml .yml .yaml .log .png).
   - `{a,b}` is expanded: every alternative must exist. `*`, `?` and `[...]` are globs: at least
     one file or directory must match. A placeholder `<name>`, and `…` or `...` in place of a
     part, stands for anything (`tests/unit/<header>_test.cpp` is `tests/unit/*_test.cpp`).
   - It must exist relative to ROOT, or to the doc's own directory, or under include/ or
     include/sluice/ (`<sluice/path.hpp>`, `s3/error.hpp`).
   - A path under Testing/ (ctest's folder in a build tree) is not checked.
   - A path under build/, or under another folder that .gitignore ignores from the top
     (`/bench/results/`), names an output, which is not in the repository: it passes when its
     last component is named in the build or the scripts (CMakeLists.txt files,
     CMakePresets.json, cmake/, scripts/, bench/), e.g. `build/device-carry/run.sh` (written by
     scripts/device_carry.sh). A last component with a glob or placeholder passes.
3. A C++ qualified name: after removing template arguments `<...>` and parentheses `(...)`
   (with what they hold) and a trailing `'s`, the span is `a::b` or `::a::b`, more parts allowed
   (`sluice::s3::server`, `cuda::get_object_to_device()`, `path<N, R, T>::async_get`). Its last
   part must appear as a whole word in the code of include/, src/, bindings/ or examples/
   (C and C++ comments and string literals do not count), and so must every part before it.
   A part of one capital letter (`P::executor_type`) is a template parameter and is not looked
   up; `sluice` is not looked up. Names in the `testing` namespace (the test fixtures) are looked
   up in tests/ as well. A name that fails this but is named whole in the build or the scripts
   (as for build/ paths) is a CMake target (`OpenSSL::Crypto`) and passes. Names in std::,
   boost::, asio::, beast::, fmt::, stdexec::, doctest::, pybind11:: and torch:: are not
   checked.
4. Any other span (a bare identifier, an option, a number, a key) is not checked.

Exit status: 0 when every span passes; 1 with one line per offence, `doc:line: `span`: why`;
2 when ROOT is not a sluice repository.
"""

from __future__ import annotations

import glob
import os
import re
import sys

DOC_FILES = ("README.md", "HACKING.md")
DOC_DIR = "docs"
EXCLUDED_DOC_DIRS = ("docs/history", "docs/data")
PATH_PREFIXES = ("src/", "include/", "tests/", "scripts/", "bench/", "docs/", "examples/",
                 "bindings/", "fuzz/", "cmake/", ".ci/", "build/")
PATH_EXTENSIONS = (".cpp", ".hpp", ".ipp", ".h", ".c", ".cu", ".py", ".sh", ".md", ".cmake",
                   ".txt", ".json", ".go", ".js", ".patch", ".map", ".toml", ".yml", ".yaml",
                   ".log", ".png")
CODE_DIRS = ("include", "src", "bindings", "examples")
CODE_EXTENSIONS = (".cpp", ".hpp", ".ipp", ".h", ".c", ".cu", ".cuh", ".py", ".go", ".js",
                   ".pyi", ".map")
C_FAMILY = (".cpp", ".hpp", ".ipp", ".h", ".c", ".cu", ".cuh")
BUILD_SOURCES = ("cmake", "scripts", "bench")
EXTERNAL_NAMESPACES = {"std", "boost", "asio", "beast", "fmt", "stdexec", "doctest", "pybind11",
                       "torch"}
SKIPPED_DIRS = {".git", "build", ".cache", ".device", "__pycache__", "node_modules"}

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
IDENT = re.compile(r"[A-Za-z_]\w*")
QUALIFIED = re.compile(r"(?:::)?[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)+")
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")


def walk_files(root: str, top: str, extensions: tuple[str, ...] | None):
    base = os.path.join(root, top)
    if os.path.isfile(base):
        yield base
        return
    for directory, subdirs, files in os.walk(base):
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_DIRS]
        for name in files:
            if extensions is None or name.endswith(extensions):
                yield os.path.join(directory, name)


def read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def strip_c_comments_and_strings(text: str) -> str:
    """Drops // and /* */ comments and string and character literals (raw strings included)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i + m.end())
                i = n if end < 0 else end + len(m.group(1)) + 2
                out.append('""')
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append(c + c)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def code_words(root: str, dirs: tuple[str, ...]) -> set[str]:
    words: set[str] = set()
    for top in dirs:
        for path in walk_files(root, top, CODE_EXTENSIONS):
            text = read(path)
            if path.endswith(C_FAMILY):
                text = strip_c_comments_and_strings(text)
            words.update(IDENT.findall(text))
    return words


def build_text(root: str) -> str:
    parts = [read(p) for top in BUILD_SOURCES for p in walk_files(root, top, None)
             if not p.endswith((".png", ".pyc"))]
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_DIRS]
        parts += [read(os.path.join(directory, f)) for f in files if f == "CMakeLists.txt"]
    preset = os.path.join(root, "CMakePresets.json")
    if os.path.exists(preset):
        parts.append(read(preset))
    return "\n".join(parts)


def docs_to_check(root: str) -> list[str]:
    found = [f for f in DOC_FILES if os.path.exists(os.path.join(root, f))]
    for path in walk_files(root, DOC_DIR, (".md",)):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if not any(rel == d or rel.startswith(d + "/") for d in EXCLUDED_DOC_DIRS):
            found.append(rel)
    return sorted(found)


def spans(text: str):
    """(line, span) for every inline code span outside fenced blocks."""
    lines = text.split("\n")
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            lines[i] = ""
        elif fence is not None:
            if m and m.group(1).startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            lines[i] = ""
    body = "\n".join(lines)
    for m in SPAN.finditer(body):
        content = m.group(2)
        if "\n\n" in content or "\n\n" in body[m.start():m.end()]:
            continue
        yield body.count("\n", 0, m.start()) + 1, " ".join(content.split())


def strip_nested(text: str, open_c: str, close_c: str) -> str | None:
    out, depth = [], 0
    for c in text:
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:
            out.append(c)
    return "".join(out) if depth == 0 else None


def expand_braces(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    result = []
    for alternative in m.group(1).split(","):
        result += expand_braces(pattern[:m.start()] + alternative + pattern[m.end():])
    return result


def looks_like_path(word: str) -> bool:
    if "/" not in word or word.startswith(("/", "~")) or "://" in word:
        return False
    return word.startswith(PATH_PREFIXES) or word.endswith(PATH_EXTENSIONS) or \
        re.sub(r"\{[^{}]*\}$", "", word).endswith(PATH_EXTENSIONS)


def clean_path(word: str) -> str:
    word = word.strip()
    if word.startswith("<") and word.endswith(">"):
        word = word[1:-1]
    word = re.sub(r":\d+(?::\d+)?$", "", word)
    word = word.rstrip(",.;:")
    return word[2:] if word.startswith("./") else word


class Checker:
    def __init__(self, root: str):
        self.root = root
        self._words: set[str] | None = None
        self._test_words: set[str] | None = None
        self._build: str | None = None

    @property
    def words(self) -> set[str]:
        if self._words is None:
            self._words = code_words(self.root, CODE_DIRS)
        return self._words

    @property
    def test_words(self) -> set[str]:
        if self._test_words is None:
            self._test_words = code_words(self.root, ("tests",))
        return self._test_words

    @property
    def output_dirs(self) -> tuple[str, ...]:
        dirs = ["build/"]
        ignore = os.path.join(self.root, ".gitignore")
        if os.path.exists(ignore):
            for line in read(ignore).splitlines():
                line = line.strip()
                if re.fullmatch(r"/[\w.-]+(/[\w.-]+)*/", line):
                    dirs.append(line[1:])
        return tuple(dirs)

    @property
    def build(self) -> str:
        if self._build is None:
            self._build = build_text(self.root)
        return self._build

    def path_problem(self, path: str, doc: str) -> str | None:
        if path.startswith("Testing/"):
            return None
        path = re.sub(r"<[^<>/]*>", "*", path)
        path = re.sub(r"(^|/)(…|\.\.\.)(?=/|$)", r"\1*", path).replace("…", "*")
        for one in expand_braces(path):
            if one.startswith(self.output_dirs):
                last = one.rstrip("/").rsplit("/", 1)[-1]
                if re.search(r"[*?\[]", last):
                    continue
                if not re.search(r"(?<![\w.-])" + re.escape(last) + r"(?![\w-])", self.build):
                    return f"build output {last!r} is made by nothing in the build or scripts"
                continue
            bases = [self.root, os.path.join(self.root, os.path.dirname(doc)),
                     os.path.join(self.root, "include"), os.path.join(self.root, "include", "sluice")]
            if re.search(r"[*?\[]", one):
                if not any(glob.glob(os.path.join(b, one), recursive=True) for b in bases):
                    return f"no file matches {one}"
            elif not any(os.path.exists(os.path.join(b, one)) for b in bases):
                return f"no such file: {one}"
        return None

    def name_problem(self, name: str) -> str | None:
        parts = [p.lstrip("~") for p in name.strip(":").split("::")]
        if parts[0] in EXTERNAL_NAMESPACES:
            return None
        words = (self.words | self.test_words) if parts[0] == "testing" else self.words
        missing = [p for p in parts if p != "sluice" and not re.fullmatch(r"[A-Z]", p) and p not in words]
        if missing and re.search(r"(?<![\w:])" + re.escape(name.strip(":")) + r"(?![\w:])", self.build):
            return None  # a CMake target
        if missing:
            return "not in include/, src/, bindings/ or examples/: " + ", ".join(missing)
        return None

    def check_span(self, span: str, doc: str) -> str | None:
        # Rule 3 first: a qualified name, whatever its template arguments or parameters hold.
        bare = strip_nested(span, "<", ">")
        bare = strip_nested(bare, "(", ")") if bare is not None else None
        if bare is not None:
            bare = re.sub(r"'s$", "", bare.strip())
            if QUALIFIED.fullmatch(bare):
                return self.name_problem(bare)
        # Rule 1: commands and snippets.
        if re.search(r"[\s=$|'\"]", span) or span.startswith("-"):
            words = span.split()
            while words and ASSIGNMENT.match(words[0]):
                words.pop(0)
            if words and looks_like_path(clean_path(words[0])) and not re.search(r"[=$|'\"]", words[0]):
                return self.path_problem(clean_path(words[0]), doc)
            return None
        # Rule 2: paths.
        path = clean_path(span)
        if looks_like_path(path):
            return self.path_problem(path, doc)
        return None


def main(argv: list[str]) -> int:
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    if not os.path.isdir(os.path.join(root, "include", "sluice")):
        print(f"check_docs: {root} is not a sluice repository (no include/sluice)", file=sys.stderr)
        return 2
    checker = Checker(root)
    problems = 0
    checked = 0
    docs = docs_to_check(root)
    for doc in docs:
        for line, span in spans(read(os.path.join(root, doc))):
            checked += 1
            why = checker.check_span(span, doc)
            if why:
                problems += 1
                print(f"{doc}:{line}: `{span}`: {why}")
    if problems:
        print(f"check_docs: {problems} of {checked} code spans in {len(docs)} docs name what does not "
              "exist (rules: the top of scripts/check_docs.py)", file=sys.stderr)
        return 1
    print(f"check_docs: {checked} code spans in {len(docs)} docs, all found")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
