"""Several minitensor runs at once on the same cores, against one run alone.

    python benchmarks/concurrency.py [--concurrent 2] [--steps 100] [--rounds 3]
                                    [--env NAME=VALUE ...] [--busy]

Each run is `demos/addition_task.py --steps S --quiet --no-figures` in a process of its own,
with its own output folder (a temporary one). A round times one run alone, then N runs started
together (wall time until the last one finishes); rounds alternate so that the two settings see
the same background load. The table gives the medians and two ratios:

    together / alone      1.0 would mean the runs did not slow each other down at all
    together / (N·alone)  the N runs against the same runs one after another (≤ 1: running
                          them at once was no worse than queueing them)

--busy replaces the N − 1 other runs by a plain Python busy loop per extra process (what a
learner's editor, notebook or test run does to a demo). --env NAME=VALUE (repeatable) sets a
variable in every run's environment, to try a thread setting, e.g.
--env OMP_WAIT_POLICY=PASSIVE or --env MINITENSOR_POLITE_THREADS=0.

The machine this runs on is usually shared: compare the numbers of one invocation, and repeat.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEMO = os.path.join(ROOT, "demos", "addition_task.py")
BUSY_LOOP = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"


def demo_command(steps, out):
    """The addition demo for `steps` steps, quiet, writing only into `out`."""
    return [sys.executable, DEMO, "--steps", str(steps), "--quiet", "--no-figures", "--out", out]


def run_together(commands, env):
    """Start every command at once; the wall time (s) until the last one exits."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for cmd in commands
    ]
    errors = [(p.wait(), p.stderr.read().decode()) for p in procs]
    elapsed = time.perf_counter() - start
    for code, err in errors:
        if code != 0:
            raise SystemExit(f"a run failed (exit {code}):\n{err}")
    return elapsed


def run_with_busy_loops(command, extra, seconds, env):
    """`command` beside `extra` busy-loop processes that spin for `seconds`; the command's
    wall time (s)."""
    loops = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(seconds=seconds)])
        for _ in range(extra)
    ]
    try:
        return run_together([command], env)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def parse_env(pairs):
    """['NAME=VALUE', ...] → this process's environment with those set."""
    env = dict(os.environ)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--env {pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--concurrent", type=int, default=2, metavar="N", help="runs at once")
    parser.add_argument("--steps", type=int, default=100, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set in every run's environment (repeatable)",
    )
    parser.add_argument(
        "--busy", action="store_true", help="N − 1 busy loops beside one run instead of N runs"
    )
    args = parser.parse_args()
    env = parse_env(args.env)
    alone, together = [], []
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"run{i}") for i in range(args.concurrent)]
        run_together([demo_command(2, outs[0])], env)  # compile or load the kernels
        for _ in range(args.rounds):
            alone.append(run_together([demo_command(args.steps, outs[0])], env))
            if args.busy:
                together.append(
                    run_with_busy_loops(
                        demo_command(args.steps, outs[0]),
                        args.concurrent - 1,
                        4 * alone[-1] + 30,
                        env,
                    )
                )
            else:
                together.append(run_together([demo_command(args.steps, out) for out in outs], env))
            print(f"  round: alone {alone[-1]:.1f} s, together {together[-1]:.1f} s", flush=True)
    a, t = statistics.median(alone), statistics.median(together)
    what = (
        f"1 run + {args.concurrent - 1} busy loop(s)"
        if args.busy
        else f"{args.concurrent} runs at once"
    )
    print(f"{os.cpu_count()} CPUs; addition demo, {args.steps} steps; env {args.env or 'default'}")
    print(
        f"one run alone:  {a:6.1f} s   (median of {args.rounds}: "
        f"{', '.join(f'{x:.1f}' for x in alone)})"
    )
    print(f"{what}: {t:6.1f} s   ({', '.join(f'{x:.1f}' for x in together)})")
    print(f"together / alone = {t / a:.2f}×", end="")
    if not args.busy:
        print(f";  together / ({args.concurrent} × alone) = {t / (args.concurrent * a):.2f}×")
    else:
        print()


if __name__ == "__main__":
    main()
