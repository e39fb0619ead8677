"""Every DuckDB query of the documentation (README.md and docs/*.md) runs
against the lake of a real `benchlake up --demo`: fenced ```sql blocks,
`duckdb -c "…"` command lines (quoted as the shell reads them) and
`duckdb.sql("…")` calls with a string literal. A query that reads a table
the demo does not write runs against an empty table with the columns
docs/tables.md documents (reported as a warning); a query that cannot be run
at all is skipped with its reason, and fails under CI=true."""
import ast
import os
import re
import shlex
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Calls that are not queries, each with why. Keep this tiny: prefer making
# a query runnable.
NOT_QUERIES = {
    # README: how to run "the DuckDB queries `up --demo` prints" in Python;
    # QUERY stands for those, which test_up_demo runs as printed.
    ("README.md", "duckdb.sql(QUERY)"),
}

FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


def _duckdb_c(text):
    """The query of the `duckdb -c QUERY` at the start of `text`, as the
    shell reads it (quotes, backslashes and line continuations)."""
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    words = [lex.get_token() for _ in range(3)]
    return words[2] if words[:2] == ["duckdb", "-c"] else None


def _duckdb_sql(text):
    """(query, None) of the `duckdb.sql(LITERAL` at the start of `text`, or
    (None, what stands there) when the argument is not a string literal."""
    rest = text[len("duckdb.sql("):]
    m = re.match(r"\s*([rRuU]?)(\"\"\"|'''|\"|')", rest)
    if not m:
        return None, "duckdb.sql(" + re.split(r"[),]", rest, maxsplit=1)[0] + ")"
    quote = m.group(2)
    at = m.end()
    while (at := rest.find(quote, at)) >= 0:
        at += len(quote)
        try:
            return ast.literal_eval(rest[m.start(1):at]), None
        except (SyntaxError, ValueError):
            continue
    return None, "an unterminated string"


def doc_queries():
    """(place, query or None, why not) of every query of the documentation;
    place is `FILE:LINE`."""
    found = []
    for path in DOCS:
        name = path.relative_to(ROOT).as_posix()
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if m:
                fence, lang = m.group(1), m.group(2).lower()
                end = i + 1
                while end < len(lines) and not lines[end].strip().startswith(fence):
                    end += 1
                block = lines[i + 1:end]
                if lang == "sql":
                    # One query per statement.
                    for q in "\n".join(block).split(";"):
                        if q.strip():
                            found.append((f"{name}:{i + 2}", q.strip(), None))
                else:
                    for j, line in enumerate(block):
                        found += _in_code(f"{name}:{i + 2 + j}", "\n".join(block[j:]), line)
                i = end + 1
                continue
            for span in re.findall(r"`([^`]+)`", lines[i]):
                found += _in_code(f"{name}:{i + 1}", span, span)
            i += 1
    return found


def _in_code(place, text, line):
    """The queries of the code `text` that start on its first line `line`."""
    out = []
    for m in re.finditer(r"\bduckdb -c\s|\bduckdb\.sql\(", line):
        rest = text[m.start():]
        if m.group(0).startswith("duckdb -c"):
            try:
                q = _duckdb_c(rest)
            except ValueError as e:
                out.append((place, None, f"`duckdb -c` not quoted as a shell reads it: {e}"))
                continue
            out.append((place, q, None) if q else (place, None, "`duckdb -c` without a query"))
        else:
            q, what = _duckdb_sql(rest)
            if q is not None:
                out.append((place, q, None))
            elif (place.split(":")[0], what) not in NOT_QUERIES:
                out.append((place, None, f"{what}: not a string literal"))
    return out


PA_TYPES = {"utf8": "string", "i32": "int32", "i64": "int64", "u64": "uint64", "f64": "float64", "bool": "bool_"}


def _pa_type(t):
    import pyarrow as pa

    t = t.strip()
    if t.startswith("list<") and t.endswith(">"):
        return pa.list_(_pa_type(t[5:-1]))
    if t.startswith("timestamp"):
        return pa.timestamp("us", tz="UTC")
    return getattr(pa, PA_TYPES[t])()


def documented_tables():
    """docs/tables.md: table name -> [(column, type)]."""
    tables, cur = {}, None
    for line in (ROOT / "docs" / "tables.md").read_text().splitlines():
        m = re.match(r"^## `(\w+)`", line)
        if m:
            cur = tables.setdefault(m.group(1), [])
            continue
        m = re.match(r"^\| `(\w+)` \| ([^|]+) \|", line)
        if m and cur is not None:
            cur.append((m.group(1), m.group(2).strip()))
    return tables


LAKE_PATH = re.compile(r"'([^']*?)tables/(\w+)/([^']*)'")


def test_documented_queries_run_on_the_demos_lake(demo, tmp_path):
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    r, data, _ = demo
    assert r.returncode == 0, r.stdout + r.stderr
    lake = data / "lake"
    queries = doc_queries()
    # The documentation's queries at the time of writing, so that a change
    # of the extraction that finds none cannot pass unnoticed.
    places = {p.split(":")[0] for p, _, _ in queries}
    assert {"README.md", "docs/slurm.md", "docs/tracer.md"} <= places, queries

    documented = documented_tables()
    empty_lake = tmp_path / "empty-lake"
    empty = set()

    def lake_of(table):
        if any((lake / "tables" / table).rglob("*.parquet")):
            return lake
        if table not in documented:
            return None
        if table not in empty:
            cols = documented[table]
            schema = pa.schema([(c, _pa_type(t)) for c, t in cols if c != "date"] + [("date", pa.date32())])
            d = empty_lake / "tables" / table / "year=1970" / "month=01"
            d.mkdir(parents=True)
            pq.write_table(schema.empty_table(), d / "part-none.parquet")
            empty.add(table)
        return empty_lake

    cannot, failed = [], []
    ran = 0
    for place, q, why in queries:
        if q is None:
            cannot.append(f"{place}: {why}")
            continue
        missing = []

        def local(m):
            at = lake_of(m.group(2))
            if at is None:
                missing.append(m.group(2))
                return m.group(0)
            return f"'{at}/tables/{m.group(2)}/{m.group(3)}'"

        sql = LAKE_PATH.sub(local, q)
        if missing:
            cannot.append(f"{place}: table(s) {', '.join(missing)} neither in the demo's lake nor in docs/tables.md")
            continue
        if "read_parquet" in sql and not LAKE_PATH.search(q):
            cannot.append(f"{place}: reads no lake table (tables/NAME/…): {q!r}")
            continue
        used = sorted({t for _, t, _ in LAKE_PATH.findall(q)} & empty)
        if used:
            warnings.warn(f"{place}: run on empty table(s) {', '.join(used)} (the demo wrote none; "
                          "columns from docs/tables.md)")
        try:
            duckdb.sql(sql).fetchall()
            ran += 1
        except duckdb.Error as e:
            failed.append(f"{place}: {q}\n  -> {e}")
    assert not failed, "documented queries that fail:\n" + "\n".join(failed)
    if cannot:
        msg = "documented queries that cannot be run:\n" + "\n".join(cannot)
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    assert ran == len(queries) and ran >= 3, queries
