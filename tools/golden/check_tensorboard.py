#!/usr/bin/env python3
"""Checks cctune's TensorBoard event files with TensorBoard's own Python readers (run by hand).

Needs `pip install tensorboard` (no TensorFlow). Writes the sample log with the C++ loggers,
then reads it back:

    bazel run //training:write_metrics_example -- /tmp/cctune_tb
    python3 tools/golden/check_tensorboard.py /tmp/cctune_tb

Checks, for the newest events.out.tfevents.* file in the directory:
  1. every record's framing and both masked CRC32Cs, with TensorBoard's record reader
     (tensorboard.compat.tensorflow_stub's PyRecordReader raises DataLossError on a bad CRC);
  2. the first event is file_version "brain.Event:2";
  3. EventAccumulator (what the TensorBoard UI uses) finds the scalar tags loss, lr, zero and
     negative, with steps 0..49 and the float32 values of the formulas in
     training/write_metrics_example.cc;
  4. the JSONL file beside it holds the same values at full double precision.
"""

import glob
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

STEPS = 50


def expected(step):
    return {
        "loss": 3.0 * math.exp(-step / 20.0) + 0.1 * math.sin(step),
        "lr": 1e-3 * step / 50.0,
        "zero": 0.0,
        "negative": -float(step),
    }


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    log_dir = sys.argv[1]
    files = sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*")), key=os.path.getmtime)
    if not files:
        sys.exit(f"no events.out.tfevents.* file in {log_dir}")
    path = files[-1]
    print(f"checking {path}")

    # 1 + 2: raw records through TensorBoard's CRC-checking reader.
    reader = pywrap_tensorflow.PyRecordReader_New(path.encode(), 0, b"")
    events = []
    while True:
        try:
            reader.GetNext()
        except Exception as e:  # errors.OutOfRangeError at the end; DataLossError on corruption
            if type(e).__name__ == "OutOfRangeError":
                break
            raise
        ev = event_pb2.Event()
        ev.ParseFromString(reader.record())
        events.append(ev)
    assert events, "no records"
    assert events[0].file_version == "brain.Event:2", events[0]
    assert len(events) == 1 + STEPS, f"{len(events)} records, expected {1 + STEPS}"
    print(f"  {len(events)} records, CRCs valid, first event file_version={events[0].file_version}")

    # 3: the accumulator the UI uses.
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    assert tags == ["loss", "lr", "negative", "zero"], tags
    for tag in tags:
        scalars = acc.Scalars(tag)
        assert [s.step for s in scalars] == list(range(STEPS)), (tag, [s.step for s in scalars])
        for s in scalars:
            want = f32(expected(s.step)[tag])
            assert s.value == want, (tag, s.step, s.value, want)
    print(f"  EventAccumulator: tags {tags}, {STEPS} steps each, values match (float32)")

    # 4: the JSONL log written by the same run.
    jsonl = os.path.join(log_dir, "metrics.jsonl")
    if os.path.exists(jsonl):
        with open(jsonl) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        rows = rows[-STEPS:]
        for row in rows:
            want = expected(row["step"])
            for tag, value in want.items():
                assert abs(row[tag] - value) <= 1e-15 * max(1.0, abs(value)), (row, tag, value)
        print(f"  {jsonl}: {len(rows)} rows match (double)")
    print("OK")


if __name__ == "__main__":
    main()
