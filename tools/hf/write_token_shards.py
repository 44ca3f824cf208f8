#!/usr/bin/env python3
"""Writes token shards of a text file the way llm.c's data scripts do (and plain arrays).

    python tools/hf/write_token_shards.py TEXT OUT_DIR [--shards N] [--val-fraction F]
                                          [--format llmc|uint16|uint32]

Byte-level ids (token id = byte value, vocabulary 256: what our byte tokenizer gives), so the
shards train the same model as the text. llmc: llm.c's dev/data/data_common.py layout, a header
of 256 little-endian int32 (magic 20240520, version 1, token count) then uint16 tokens; uint16 /
uint32: the bare little-endian array. The first (1 - F) of the text is cut into N train shards
OUT_DIR/train_000.bin ...; the rest is OUT_DIR/val_000.bin. Prints each file and its tokens.
Only the standard library and numpy.
"""
import argparse
import os

import numpy as np


def write(path, tokens, fmt):
    with open(path, "wb") as f:
        if fmt == "llmc":
            header = np.zeros(256, dtype="<i4")
            header[0], header[1], header[2] = 20240520, 1, len(tokens)
            f.write(header.tobytes())
            f.write(tokens.astype("<u2").tobytes())
        else:
            f.write(tokens.astype("<u2" if fmt == "uint16" else "<u4").tobytes())
    print(f"{path}: {len(tokens)} tokens ({fmt})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text")
    ap.add_argument("out_dir")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--format", choices=["llmc", "uint16", "uint32"], default="llmc")
    ap.add_argument("--max-bytes", type=int, default=0, help="use only the first N bytes")
    a = ap.parse_args()
    data = open(a.text, "rb").read()
    if a.max_bytes:
        data = data[: a.max_bytes]
    tokens = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    n_train = int(len(tokens) * (1 - a.val_fraction))
    os.makedirs(a.out_dir, exist_ok=True)
    bounds = np.linspace(0, n_train, a.shards + 1).astype(int)
    for i in range(a.shards):
        write(os.path.join(a.out_dir, f"train_{i:03d}.bin"), tokens[bounds[i]:bounds[i + 1]],
              a.format)
    write(os.path.join(a.out_dir, "val_000.bin"), tokens[n_train:], a.format)


if __name__ == "__main__":
    main()
