"""Rewrites a .cu file into C++ for the CPU emulator (see emu.h).

`kernel<<<grid, block, smem, stream>>>(args)` becomes
`::emu::Launch(kernel, ::emu::LaunchConfig(grid, block, smem, stream), args)`, and
`extern __shared__ float name[];` becomes a pointer to the block's dynamic shared memory.
Usage: prep.py IN.cu OUT.cc (OUT is rewritten only when its content changes).
"""
import pathlib
import re
import sys

LAUNCH = re.compile(r"([\w:]+(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
DYNAMIC_SHARED = re.compile(r"extern __shared__ (\w+) (\w+)\[\];")


def main():
    src = pathlib.Path(sys.argv[1]).read_text()
    src = DYNAMIC_SHARED.sub(r"\1* \2 = ::emu::DynamicShared<\1>();", src)
    src = LAUNCH.sub(
        lambda m: f"::emu::Launch({m.group(1)}, ::emu::LaunchConfig({m.group(2)}), ", src)
    out = pathlib.Path(sys.argv[2])
    if not out.exists() or out.read_text() != src:
        out.write_text(src)


if __name__ == "__main__":
    main()
