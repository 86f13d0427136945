"""Whether this machine holds its speed: sha256 MB/s on one core, then on every core at once, again and again.

    python bench/bench_core_speeds.py [--probes 40] [--pause 1.0]

Each probe hashes 16 MB three times in one process (the best pass counts), then the same in one process per core
at once, then in one process again, and prints the readings and the scaling: the cores together against the one
core alone. A machine fit to judge a ratio such as ``--jobs 2`` / (2 x ``--jobs 1``) to a few percent reads the
same speed in every probe and scales near 1.00. The bench VM of 2026-11-28 did not: each core switched between
about 380 and 175-240 MB/s, on its own and within seconds, and two cores at once did 0.54x to 1.40x of twice one
(docs/performance.md). Run it before a speed bench, and read the bench's figures with what it prints.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import statistics
import time

DATA_MB = 16


def core_speed(_: object = None) -> float:
    """MB/s of sha256 on this core: the best of three passes over DATA_MB."""
    data = bytes(DATA_MB << 20)
    best = 0.0
    for _pass in range(3):
        started = time.perf_counter()
        hashlib.sha256(data).digest()
        best = max(best, DATA_MB / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between probes")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    scalings = []
    with multiprocessing.get_context("spawn").Pool(cores) as pool:
        pool.map(core_speed, range(cores))  # the workers are up before the first probe
        for _ in range(args.probes):
            alone = pool.apply(core_speed)
            together = pool.map(core_speed, range(cores), chunksize=1)
            alone_again = pool.apply(core_speed)
            scalings.append(sum(together) / (cores * (alone + alone_again) / 2))
            readings = " + ".join(f"{s:.0f}" for s in together)
            print(
                f"{time.strftime('%H:%M:%S')}  one core {alone:.0f} / {alone_again:.0f} MB/s,"
                f"  {cores} at once {readings},  scaling {scalings[-1]:.2f}",
                flush=True,
            )
            time.sleep(args.pause)
    print(
        f"scaling over {len(scalings)} probes: median {statistics.median(scalings):.2f},"
        f" {min(scalings):.2f} to {max(scalings):.2f}"
    )


if __name__ == "__main__":
    main()
