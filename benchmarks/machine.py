"""What machine a benchmark ran on, printed above every table: the same code is faster or
slower than PyTorch depending on the CPU (an AMD Zen 5 and an Intel Xeon differ by 1.5x on
the same training step), so a number without its CPU says little.

    python benchmarks/machine.py      # prints the line the other benchmarks print
"""

import os
import platform
import time

# Before each block of a library's steps, when libraries take turns: the other library's idle
# workers stop spinning first (OpenMP's and OpenBLAS's spin for a while after their last work)
PAUSE_S = 0.05


def cpu_model():
    """The CPU's model name, vendor, family and model numbers, and its widest vector unit,
    from /proc/cpuinfo (Linux) or platform (elsewhere)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return (
        f"{info.get('model name', '?')} ({info.get('vendor_id', '?')}, family "
        f"{info.get('cpu family', '?')} model {info.get('model', '?')}, {vector})"
    )


def thread_counts():
    """numba's and numpy's BLAS thread counts in this process, as a phrase."""
    parts = [f"{os.cpu_count()} CPUs"]
    try:
        import numpy  # noqa: F401  (BLAS is loaded with numpy)
        from threadpoolctl import threadpool_info

        blas = sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
        parts.append(f"BLAS threads {'/'.join(map(str, blas)) or '?'}")
    except ImportError:
        pass
    try:
        import numba

        parts.append(f"numba threads {numba.get_num_threads()}")
    except ImportError:
        pass
    return ", ".join(parts)


def take_turns(script, libs, child_args, rounds):
    """Run `script --child LIB *child_args` once per library, each in a process of its own
    (their thread pools never meet), and have them take turns for `rounds` rounds: each
    child prints "ready", then one JSON object {name: value} per "go" line it reads. Returns
    {lib: {name: [value per round]}}."""
    import json
    import subprocess
    import sys

    children = {}
    for lib in libs:
        command = [sys.executable, script, "--child", lib, *child_args]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if process.stdout.readline().strip() != "ready":
            sys.exit(f"the {lib} child did not start (is {lib} installed?)")
        children[lib] = process
    times = {lib: {} for lib in libs}
    for _ in range(rounds):
        for lib, process in children.items():
            time.sleep(PAUSE_S)  # the other library's idle workers stop spinning first
            process.stdin.write("go\n")
            process.stdin.flush()
            for name, value in json.loads(process.stdout.readline()).items():
                times[lib].setdefault(name, []).append(value)
    for process in children.values():
        process.stdin.close()
        process.wait()
    return times


def print_medians(times, names, label, digits, title, columns):
    """The machine, `title`, then a table: one row per name with minitensor's median, torch's
    (if timed), their ratio, and the ratio round by round: each round timed the two libraries
    one right after the other, so a spell of the shared machine that slows both (they come and
    go over seconds) cancels in that round's ratio, where it can sway one library's median.
    The last column gives the median of those ratios and their range. `columns`: the first
    column's heading and the unit of the others ("op", "µs"); `label(name)` is a row's first
    cell, `digits` the decimals shown."""
    import statistics

    first, unit = columns
    print(f"machine: {cpu_model()}")
    print(title)
    heading = f"| {first} | minitensor {unit} | PyTorch {unit} | ratio |"
    print(heading + (" ratio round by round: median (range) |" if "torch" in times else ""))
    print("|---|---|---|---|" + ("---|" if "torch" in times else ""))
    for name in names:
        ours = statistics.median(times["minitensor"][name])
        if "torch" not in times:
            print(f"| {label(name)} | {ours:.{digits}f} | – | – |")
            continue
        theirs = statistics.median(times["torch"][name])
        cells = (ours, theirs, ours / theirs)
        paired = sorted(o / t for o, t in zip(times["minitensor"][name], times["torch"][name]))
        rounds = f"{statistics.median(paired):.2f}x ({paired[0]:.2f}–{paired[-1]:.2f})"
        print(f"| {label(name)} | " + " | ".join(f"{c:.{digits}f}" for c in cells) + "x |", end="")
        print(f" {rounds} |")


def describe():
    """One line: the CPU and the thread counts."""
    return f"machine: {cpu_model()}; {thread_counts()}"


if __name__ == "__main__":
    print(describe())
