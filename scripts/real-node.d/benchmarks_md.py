"""Puts what `scripts/real-node --wake-bench` measured into BENCHMARKS.md: table rows and a
subsection, each in place of its earlier form, else where it first belongs.

  benchmarks_md.py ROWS SECTION PREFIX [EXCEPT]

ROWS (a file of table rows) replaces the rows that start with PREFIX and not with EXCEPT;
without such rows, they go after the last "| real node: " row, else at the end of the first
table. SECTION (a file whose first line is its "### " heading) replaces that subsection, up to
the next heading; without it, it goes after subsection "Wake to ready on the real node", else
at the end of "## How each figure is measured". scripts/bench keeps both as they are.
"""

import sys

WAKE = "### Wake to ready on the real node"


def main(rows_file, section_file, prefix, unless=None):
    path = "BENCHMARKS.md"
    rows = open(rows_file).read().rstrip("\n").split("\n")
    section = open(section_file).read().rstrip("\n").split("\n")
    lines = open(path).read().split("\n")
    mine = [i for i, l in enumerate(lines) if l.startswith(prefix) and not (unless and l.startswith(unless))]
    if mine:
        lines[mine[0]:mine[-1] + 1] = rows
    else:
        others = [i for i, l in enumerate(lines) if l.startswith("| real node: ")]
        if others:
            at = others[-1] + 1
        else:
            at = next(i for i, l in enumerate(lines) if l.startswith("| figure |"))
            while lines[at].startswith("|"):
                at += 1
        lines[at:at] = rows
    heading = section[0]

    def next_heading(i):
        while i < len(lines) and not lines[i].startswith(("### ", "## ")):
            i += 1
        return i

    if heading in lines:
        start = lines.index(heading)
        end = next_heading(start + 1)
    elif WAKE in lines:
        start = end = next_heading(lines.index(WAKE) + 1)
    else:
        measured = lines.index("## How each figure is measured")
        start = end = next(i for i in range(measured + 1, len(lines)) if lines[i].startswith("## "))
    lines[start:end] = section + [""]
    open(path, "w").write("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:])
