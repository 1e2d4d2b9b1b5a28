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
# A nested (list) column, which the reader rejects by name.
pq.write_table(pa.table({"messages": [["a", "b"], ["c"]]}), OUT + "nested.parquet")
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
