#!/usr/bin/env python3
"""Writes the Parquet fixtures of data/parquet_records_test.cc with pyarrow, and beside each
one the same rows as JSON lines (pyarrow's own reading of the file), which the test compares
against. Run from the repository root: python3 data/testdata/make_parquet.py"""
import json

import pyarrow as pa
import pyarrow.parquet as pq

OUT = "data/testdata/"

# Alpaca-like rows: repeated strings (dictionary pages), an empty string, a null, non-ASCII
# text, and numeric / boolean columns. Small row groups and pages so that the reader crosses
# page and row-group boundaries.
rows = []
for i in range(300):
    rows.append({
        "instruction": f"Instruction {i % 7}",
        "input": "" if i % 3 else f"input ünï {i}",
        "output": None if i == 5 else f"answer {i * 31 % 101} " + "x" * (i % 13),
        "id": i * 1000003 - 150,
        "score": i / 8.0 - 3.5,
        "small": (i * 7) % 200 - 100,
        "flag": i % 4 == 1,
    })
table = pa.Table.from_pylist(rows, schema=pa.schema([
    ("instruction", pa.string()), ("input", pa.string()), ("output", pa.string()),
    ("id", pa.int64()), ("score", pa.float64()), ("small", pa.int32()), ("flag", pa.bool_())]))


def write(name, **kwargs):
    pq.write_table(table, OUT + name, **kwargs)
    assert pq.read_table(OUT + name).to_pylist() == rows


# What the test expects of every rows_*.parquet file.
with open(OUT + "rows.expected.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")


# pyarrow's defaults (snappy, dictionary encoding, data page v1), as the hub's files are.
write("rows_snappy.parquet", row_group_size=128, data_page_size=512)
# Data page v2, no compression, PLAIN encoding.
write("rows_v2_plain.parquet", row_group_size=1000, compression="none", use_dictionary=False,
      data_page_version="2.0")
# Nested rows: a list of structs (chat turns) with empty and null lists, null elements and
# null fields; a struct; a list of integers. rows_nested.expected.jsonl holds them.
turns = [{"from": "system", "value": "S"}, {"from": "human", "value": "H"},
         {"from": "gpt", "value": "G"}]
nested_rows = []
for i in range(40):
    conv = [dict(t, value=f"{t['value']}{i}") for t in turns[: 1 + i % 3]]
    if i % 7 == 3:
        conv = []
    elif i % 7 == 5:
        conv = None
    elif i % 11 == 4:
        conv = conv + [None, {"from": "gpt", "value": None}]
    nested_rows.append({
        "id": i,
        "conversations": conv,
        "meta": None if i % 9 == 2 else {"lang": "en" if i % 2 else None, "n": i * 3},
        "scores": [i, -i, 2 * i][: i % 4] if i % 5 else None,
    })
nested = pa.Table.from_pylist(nested_rows, schema=pa.schema([
    ("id", pa.int64()),
    ("conversations", pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))),
    ("meta", pa.struct([("lang", pa.string()), ("n", pa.int32())])),
    ("scores", pa.list_(pa.int64()))]))
for name, kwargs in [("rows_nested.parquet", {"row_group_size": 16, "data_page_size": 256}),
                     ("rows_nested_v2.parquet", {"compression": "none", "use_dictionary": False,
                                                 "data_page_version": "2.0"})]:
    pq.write_table(nested, OUT + name, **kwargs)
    assert pq.read_table(OUT + name).to_pylist() == nested_rows
with open(OUT + "rows_nested.expected.jsonl", "w") as f:
    for r in nested_rows:
        f.write(json.dumps(r) + "\n")
# Shapes the reader rejects by name: a list of lists, and a map.
pq.write_table(pa.table({"grid": [[[1], [2, 3]], [[4]]]}), OUT + "list_of_lists.parquet")
pq.write_table(pa.table({"attrs": pa.array([[("a", 1)], [("b", 2)]],
                                            type=pa.map_(pa.string(), pa.int64()))}),
               OUT + "map.parquet")
# A codec the reader does not have.
pq.write_table(pa.table({"text": ["a", "b"]}), OUT + "zstd.parquet", compression="zstd")
# Alpaca rows as the hub's tatsu-lab/alpaca holds them (Parquet, snappy), for
# data/dataset_components_test.cc.
pq.write_table(pa.table({
    "instruction": ["Add 2 and 3.", "Echo"],
    "input": ["", "hi"],
    "output": ["5", "hi"],
    "text": ["(the full prompt)", "(the full prompt)"],
}), OUT + "alpaca.parquet")
# SlimOrca's conversations (a list of from/value structs), for data/dataset_components_test.cc.
pq.write_table(pa.table({"conversations": [turns]}), OUT + "slimorca.parquet")
