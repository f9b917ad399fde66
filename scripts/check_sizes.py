#!/usr/bin/env python3
"""Fails when a product file is over 800 lines or a product function over 120 (issue 27 item 5).

Product files are the C++ (.cpp, .h, .h.in) and Python (.py) sources under launcher/, worker/
and cli/; tests/ and fuzz/ are not product. A C++ function is measured with a brace scan
(comments, strings, raw strings and character literals stripped first) from the line of its
signature to its closing brace; lambdas and local classes count toward the function they sit
in. A Python function is measured with `ast` (def line to end line, decorators excluded).

Usage: check_sizes.py [--root DIR] [--max-file-lines N] [--max-function-lines N] [--all]
Prints one line per violation, `path:function:lines` (a file over its limit is `path::lines`),
and exits 1 if there is any that the allow-list below does not name. `--all` also lists the
allowed ones. `--self-test` checks the scanner itself on known snippets.
"""

import argparse
import ast
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
PRODUCT_DIRS = ("launcher", "worker", "cli")
CPP_SUFFIXES = (".cpp", ".h", ".h.in", ".cc", ".hpp")

# Files and functions still over their limit while their owners split them (issue 27). An entry
# is `path` (the file) or `path:function`, with the owner who splits it. An entry that no longer
# matches a violation is reported as stale (a warning, so that the owner's landing does not fail
# on it), to be removed: the list only shrinks.
ALLOWED: dict = {}

CONTROL_KEYWORDS = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return"}
SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def strip_cpp(text):
    """Returns `text` with comments, string and character literals and preprocessor lines
    replaced by spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            i += 1
            at_line_start = True
            continue
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', text[i:i + 40])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            closing = ")" + raw.group(1) + '"'
            end = text.find(closing, i + raw.end())
            end = n if end < 0 else end + len(closing)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
            continue
        if c == "'":
            # A digit separator (1'000) is inside a number token, not a character literal.
            j = i - 1
            while j >= 0 and (text[j].isalnum() or text[j] in "_."):
                j -= 1
            if j + 1 < i and text[j + 1].isdigit():
                out.append(" ")
                i += 1
                continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            out.append(c + " " * (end - i - 2) + c if end - i >= 2 else c)
            i = end
            continue
        out.append(c)
        i += 1
    return "".join(out)


def outside_parens(header):
    """The parts of `header` at parenthesis depth 0, and whether any parenthesis was seen."""
    depth, kept, seen = 0, [], False
    for c in header:
        if c == "(":
            depth += 1
            seen = True
        elif c == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            kept.append(c)
    return "".join(kept), seen


def function_name(header):
    """The (qualified) name before the first top-level parameter list of `header`."""
    flat = re.sub(r"\s*::\s*", "::", re.sub(r"\s+", " ", header))
    match = re.search(r"((?:[A-Za-z_]\w*(?:<[^()]*>)?::)*)"
                      r"(operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*)\s*(?:<[^()]*>)?\s*\(", flat)
    return match.group(1) + re.sub(r"\s+", "", match.group(2)) if match else "?"


def cpp_functions(text):
    """Yields (name, first_line, last_line) for every outermost function body in `text`."""
    code = strip_cpp(text)
    line = 1
    header, header_line = "", None
    stack = []  # "scope", "data", "init" entries for braces that are not function bodies
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "\n":
            line += 1
            header += " "
            i += 1
            continue
        if c in ";":
            header, header_line = "", None
            i += 1
            continue
        if c == "}":
            kind = stack.pop() if stack else "scope"
            if kind == "init":  # a member initialiser's braces: the signature goes on
                header += "{}"
            else:
                header, header_line = "", None
            i += 1
            continue
        if c != "{":
            if not c.isspace() and header_line is None:
                header_line = line
            header += c
            i += 1
            continue
        # An opening brace: a namespace or class body, a braced initialiser, or a function body.
        flat, has_parens = outside_parens(header)
        words = re.findall(r"[A-Za-z_]\w*", flat)
        after_params = header[header.rfind(")") + 1:] if ")" in header else ""
        if SCOPE_KEYWORDS.search(flat) and not has_parens or re.match(r"\s*extern\s*\"", header):
            stack.append("scope")
            header, header_line = "", None
            i += 1
            continue
        if has_parens and re.search(r"(?<!:):(?!:)", after_params) and \
                re.search(r"[\w>]\s*$", header) and not re.search(r"\)\s*$", header):
            stack.append("init")  # `Type::Type(args) : member_{`
            i += 1
            continue
        if not has_parens or (words and words[0] in CONTROL_KEYWORDS) or "=" in flat.split("[")[0] \
                and not re.search(r"\boperator\b", flat):
            stack.append("data")
            header, header_line = "", None
            i += 1
            continue
        # A function body: find its matching brace.
        start = header_line or line
        name = function_name(header)
        depth = 0
        while i < n:
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            elif code[i] == "\n":
                line += 1
            i += 1
        yield name, start, line
        header, header_line = "", None
        i += 1


def python_functions(text, path):
    tree = ast.parse(text, filename=path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno


def product_files(root):
    for top in PRODUCT_DIRS:
        for directory, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(CPP_SUFFIXES) or name.endswith(".py"):
                    yield os.path.join(directory, name)


def measure(root, max_file_lines, max_function_lines):
    """Returns [(key, text)] for every file and function over its limit."""
    found = []
    for path in product_files(root):
        relative = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > max_file_lines:
            found.append((relative, f"{relative}::{lines}"))
        functions = python_functions(text, path) if path.endswith(".py") else cpp_functions(text)
        for name, first, last in functions:
            length = last - first + 1
            if length > max_function_lines:
                found.append((f"{relative}:{name}", f"{relative}:{name}:{length}"))
    return found


# Snippets the brace scan must measure right: (source, [(name, first line, last line)]).
SELF_TEST_CASES = [
    ("int f(int a) {\n  return a;\n}\n", [("f", 1, 3)]),
    ("namespace n {\nstruct S {\n  int get() const { return 1; }\n};\n}\n", [("get", 3, 3)]),
    # Braces inside strings, raw strings, characters and comments are not code.
    ('std::string css() {\n  return R"css(a { b: c; } })css";\n}\nchar g() { return \'{\'; }\n'
     '// void h() {\n/* { */ int k() {\n  return "}";\n}\n',
     [("css", 1, 3), ("g", 4, 4), ("k", 6, 8)]),
    # A constructor's braced member initialisers belong to its signature.
    ("Foo::Foo(int a)\n    : x_{a},\n      y_(a) {\n  go();\n}\n", [("Foo::Foo", 1, 5)]),
    # Lambdas and local classes count toward the function around them; a signature over
    # several lines starts at its first line; data initialisers and enums are not functions.
    ("const int table[] = {1, 2};\nenum class E { a, b };\nstatic std::vector<int>\n"
     "make(int n,\n     int m) {\n  auto l = [&](int x) {\n    return x;\n  };\n"
     "  if (n) {\n  }\n  return {l(m)};\n}\n",
     [("make", 3, 12)]),
    ("auto Clock::now() const noexcept -> Time {\n  return {};\n}\n"
     "bool operator==(const A&, const A&) = default;\nvoid b() { int x = 1'000; }\n",
     [("Clock::now", 1, 3), ("b", 5, 5)]),
]


def self_test():
    failures = 0
    for source, expected in SELF_TEST_CASES:
        got = list(cpp_functions(source))
        if got != expected:
            print(f"self-test: measured {got}, expected {expected} in:\n{source}")
            failures += 1
    got = list(python_functions("def a():\n    def b():\n        pass\n    return 1\n", "t.py"))
    if sorted(got) != [("a", 1, 4), ("b", 2, 3)]:
        print(f"self-test: python measured {got}")
        failures += 1
    print(f"self-test: {len(SELF_TEST_CASES) + 1 - failures} of {len(SELF_TEST_CASES) + 1} cases right")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--max-file-lines", type=int, default=MAX_FILE_LINES)
    parser.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    parser.add_argument("--all", action="store_true", help="also list allowed violations")
    parser.add_argument("--self-test", action="store_true", help="check the scanner itself")
    args = parser.parse_args()
    if args.self_test:
        return self_test()

    found = measure(args.root, args.max_file_lines, args.max_function_lines)
    failed = False
    for key, text in found:
        if key in ALLOWED:
            if args.all:
                print(f"{text} (allowed: {ALLOWED[key]})")
            continue
        print(f"{text}: over the limit ({args.max_file_lines} lines a file, "
              f"{args.max_function_lines} a function); split it by what its parts are")
        failed = True
    keys = {key for key, _ in found}
    for key, owner in sorted(ALLOWED.items()):
        if key not in keys:
            print(f"warning: {key}: allowed in scripts/check_sizes.py ({owner}) but no longer "
                  f"over the limit; remove the entry")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
