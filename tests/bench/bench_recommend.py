"""Bench: `beamalloc recommend NODE` on a node with 2 GiB of binary_alloc (issue 22, cost line).

    .venv/bin/python tests/bench/bench_recommend.py [--runs N] [--base B] [--baseline PY]
        [--node NODE --cookie-file F]

One real node runs samples/workloads/churn.erl scaled up under `+MBas bf` (a base set of B
binaries of 600-1000 B, a spike to 15 x B, a random drop, every survivor replaced, then steady
churn): about 2.2 GiB of binary_alloc at B = 160,000. Then, alternated N times:

* `recommend NODE --json` as an operator runs it: two reads of the node (the turnover), the
  restart-true prediction (the node's history replayed from an empty VM, scaled down to
  advice/predict.HISTORY_BLOCKS peak blocks), the verdict; run through
  tests/bench/recommend_stages.py, which times each stage in the command's own process (the
  breakdown printed last: startup, imports, reads, scans, replays, the wait, rendering);
* `recommend NODE --json --rate-seconds 0`: the same without the turnover's second read
  (binary_alloc's counters read until they show it, at most advice/predict.TURNOVER_SECONDS);
* the floor, in the same run: `recommend NODE --json --no-predict --rate-seconds 0` (reading the
  node, its processes and the rules, no replay, no second read);
* `snapshot NODE`: the allocators only (issue 28 item 3: recommend within 1.5x of it, the
  process scan and ETS scan over our own client: no BEAM booted).

* with `--baseline PY` (another checkout's venv python, e.g. /work/main/.venv/bin/python):
  `recommend NODE --json` of that checkout too, in the same alternation: the ratio of ours to
  it, and whether both give the same verdict state and flags.

`--node` takes a node already running (e.g. the same workload kept up between runs) instead of
starting one. Prints medians of wall and CPU time (user + system of the command, its threads
included: on a shared machine the CPU is the steadier figure), the ratios to the floor and to
`snapshot`, the time the prediction adds, and the prediction (its scale, calibration error,
futures). Goal: the full command within 3 s on this machine. A plain script, not a test: tests
never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector.live import snapshot_node

STAGES = Path(__file__).resolve().parent / "recommend_stages.py"


def _cli(node: str, cookie: Path, *extra: str, command: str = "recommend",
         python: str = sys.executable, stages: bool = False,
         ) -> tuple[float, float, dict, dict[str, dict[str, float]]]:  # fmt: skip
    """Wall and CPU seconds of one command, its JSON, and with `stages` what each stage cost
    (tests/bench/recommend_stages.py runs the command in its process, its stages timed)."""
    # a checkout's modules compile once, as an operator's do (this shell may say not to)
    env = {k: v for k, v in os.environ.items()
           if k not in ("BEAMALLOC_COOKIE", "PYTHONDONTWRITEBYTECODE")}  # fmt: skip
    t = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    how = [str(STAGES)] if stages else ["-m", "beamalloc.cli"]
    cmd = [python, *how, command, node, "--cookie-file",
           str(cookie), "--timeout", "120", "--json",
           *extra]  # fmt: skip
    # run outside the checkout: `-m` imports the python's installed package, not ./beamalloc
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=True,
                       cwd="/")  # fmt: skip
    wall = time.perf_counter() - t
    rv = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = rv.ru_utime - ru.ru_utime + rv.ru_stime - ru.ru_stime
    got = json.loads(r.stderr.strip().splitlines()[-1]) if stages else {}
    if got:  # the interpreter's start and exit: what the child took beyond its own total
        got["startup"] = {"wall": wall - got["total"]["wall"], "cpu": cpu - got["total"]["cpu"]}
    return wall, cpu, json.loads(r.stdout), got


#: The breakdown's rows: (stage, what it is); `ahead` overlaps the rows after `ets`.
ROWS = (("startup", "interpreter start and exit"),
        ("imports", "the modules the command loads"),
        ("first_read", "first read: the allocators and carriers"),
        ("process_scan", "the process scan (a thread beside the first read)"),
        ("ets", "the ETS scan (a thread beside the first read)"),
        ("turnover", "second read: binary_alloc's counters until they show the turnover"),
        ("wait", "the fixed wait (a speed trade, or idle heaps worth two reads)"),
        ("second_read", "second read: the allocators again"),
        ("second_scan", "second read: the processes again"),
        ("join", "waiting for the replays run ahead"),
        ("verdict", "the verdict (rules; replays not run ahead)"),
        ("render", "the JSON out"),
        ("total", "in the process (startup excluded)"),
        ("ahead", "the replays run ahead (a thread, from the first read on)"),
        ("history", "  of which calibration: the histories generated into the model, forked"),
        ("replays", "  every history replay pass (calibration and proposals)"))  # fmt: skip


def _breakdown(runs: list[dict[str, dict[str, float]]], snapshot: tuple[float, float]) -> None:
    """The median of each stage over the runs, and its share of `snapshot`'s wall and CPU."""
    print("stages of `recommend NODE` (median wall / CPU seconds; x: of `snapshot`'s, same run)")
    for key, what in ROWS:
        xs = [r[key] for r in runs if key in r]
        if not xs:
            continue
        w = statistics.median(x["wall"] for x in xs)
        c = statistics.median(x["cpu"] for x in xs)
        print(f"  {key:12} {w:6.2f} s {c:6.2f} s CPU  ({w / snapshot[0]:4.1f}x / "
              f"{c / snapshot[1]:4.1f}x)  {what}")


def _said(result: dict) -> tuple[str, str]:
    """What a verdict decides: its state and the flags it pastes."""
    return result["verdict"]["state"], result.get("emulator_flags", "")


@contextlib.contextmanager
def _node(args: argparse.Namespace) -> Iterator[tuple[str, Path]]:
    """The node to read and a file holding its cookie: `--node`'s, or a churn node started."""
    if args.node:
        yield args.node, Path(args.cookie_file)
        return
    env = {"CHURN_BASE": str(args.base), "CHURN_LOAD": "5000"}
    with WorkloadNode("churn", ["+MBas", "bf"], env) as wl, tempfile.TemporaryDirectory() as tmp:
        wl.wait_ready(timeout=900)
        cookie = Path(tmp) / "cookie"
        cookie.write_text(wl.cookie + "\n")
        yield wl.node, cookie


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--base", type=int, default=160_000)
    ap.add_argument("--baseline", metavar="PY", help="another checkout's venv python: its "
                    "`recommend NODE` alternated with ours")  # fmt: skip
    ap.add_argument("--node", help="a node already running the workload (with --cookie-file)")
    ap.add_argument("--cookie-file", help="the file holding --node's cookie")
    args = ap.parse_args()
    if bool(args.node) != bool(args.cookie_file):
        ap.error("--node and --cookie-file go together")
    with _node(args) as (node, cookie):
        snap = snapshot_node(node, cookie.read_text().strip(), timeout=120.0)
        insts = snap.instances("binary_alloc")
        size = sum(i.mbcs.carriers_size.current + i.sbcs.carriers_size.current
                   + (i.mbcs_pool.carriers_size if i.mbcs_pool else 0) for i in insts)  # fmt: skip
        print(
            f"node: churn x {args.base} under +MBas bf, binary_alloc {size / 2**30:.2f} GiB in "
            f"{len(snap.carriers_of('binary_alloc'))} carriers"
        )
        names = ["recommend", *(["baseline"] if args.baseline else []), "no_turnover",
                 "floor", "snapshot"]  # fmt: skip
        times: dict[str, list[float]] = {k: [] for k in names}
        cpus: dict[str, list[float]] = {k: [] for k in names}
        result: dict = {}
        said: dict[str, set[tuple[str, str]]] = {"ours": set(), "baseline": set()}
        stages: list[dict[str, dict[str, float]]] = []
        for _ in range(args.runs):
            for name in names:
                extra = {"no_turnover": ("--rate-seconds", "0"),
                         "floor": ("--no-predict", "--rate-seconds", "0")}.get(name, ())
                dt, cpu, out, st = _cli(node, cookie, *extra,
                                        command="snapshot" if name == "snapshot" else "recommend",
                                        python=args.baseline if name == "baseline"
                                        else sys.executable, stages=name == "recommend")
                if st:
                    stages.append(st)
                times[name].append(dt)
                cpus[name].append(cpu)
                if name == "recommend":
                    result = out
                    said["ours"].add(_said(out))
                elif name == "baseline":
                    said["baseline"].add(_said(out))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(
            f"{k:11}: median {med[k]:.2f} s over {len(v)} runs ({', '.join(f'{x:.2f}' for x in v)}"
            f"); CPU {statistics.median(cpus[k]):.2f} s"
        )
    print(
        f"ratio recommend / floor: {med['recommend'] / med['floor']:.2f}; the prediction and "
        f"the second read add {med['recommend'] - med['floor']:.2f} s"
    )
    print(
        f"ratio recommend / snapshot: {med['recommend'] / med['snapshot']:.2f}; without the "
        f"turnover's second read (--rate-seconds 0): "
        f"{med['no_turnover'] / med['snapshot']:.2f}; the floor: "
        f"{med['floor'] / med['snapshot']:.2f} (goal: within 1.5)"
    )
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(
        f"CPU ratios to snapshot: recommend {cpu['recommend'] / cpu['snapshot']:.2f}, "
        f"--rate-seconds 0 {cpu['no_turnover'] / cpu['snapshot']:.2f}, the floor "
        f"{cpu['floor'] / cpu['snapshot']:.2f}"
    )
    _breakdown(stages, (med["snapshot"], cpu["snapshot"]))
    if args.baseline:
        print(
            f"ratio recommend / baseline ({args.baseline}): wall "
            f"{med['recommend'] / med['baseline']:.2f}, CPU "
            f"{cpu['recommend'] / cpu['baseline']:.2f}; verdicts: ours {sorted(said['ours'])}, "
            f"baseline {sorted(said['baseline'])}"
            f"{' (the same)' if said['ours'] == said['baseline'] else ' (DIFFER)'}"
        )
    shown = set()
    for r in result.get("recommendations", []) + result.get("held_back", []):
        p = r.get("predicted") or {}
        if p.get("seeded_from") == "history" and r["rule"] not in shown:
            shown.add(r["rule"])
            futures = ", ".join(f"{f['name']} {-100 * f['unused_saving']:+.0f} %"
                                for f in p.get("futures") or ())  # fmt: skip
            print(
                f"{r['rule']}: history at {p['model']['scale']:.3f} of the node, "
                f"{p['model']['events']} events, calibration error "
                f"{p['calibration']['error']:.3f}, {-100 * p['unused_saving']:+.0f} % "
                f"(known: {p['known']}; {p['known_by']}){'; ' + futures if futures else ''}"
            )
    print(f"goal: recommend NODE within 3 s: {'met' if med['recommend'] <= 3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
