"""lipfp's VNN-COMP 2021 verdicts beside every tool's published ones (issue 31).

usage: python tests/vnncomp/table.py BENCHMARK LIPFP_CSV [RESULTS_DIR]

BENCHMARK is `mnistfc` or `acasxu`; LIPFP_CSV is what `lipfp verify --instances ... --result`
wrote (onnx,vnnlib,result,seconds); RESULTS_DIR defaults to
../shared/benchmarks/vnncomp2021/results. Prints, per network (all ACAS Xu networks as one), a
Markdown table: per tool the instances verified (unsat) and falsified (sat), the mean seconds of
its decided instances, and how many of its verdicts contradict another tool's; then every
instance where lipfp's verdict contradicts a published one. Test tooling only: it reads files.
"""

import csv
import os
import sys
from collections import defaultdict

WORD = {"holds": "unsat", "violated": "sat", "unsat": "unsat", "sat": "sat"}


def verdict(word):
    return WORD.get(word.strip().lower(), "-")


def published(results, bench):
    """{tool: {(onnx, vnnlib): (verdict, seconds)}}"""
    out = defaultdict(dict)
    for name in sorted(os.listdir(results)):
        if not name.endswith(".csv"):
            continue
        tool = name[:-4]
        with open(os.path.join(results, name)) as f:
            for row in csv.reader(f):
                if len(row) < 6 or row[0] != bench:
                    continue
                key = (os.path.basename(row[1]), os.path.basename(row[2]))
                try:
                    t = float(row[5])
                except ValueError:
                    t = float("nan")
                out[tool][key] = (verdict(row[4]), t)
    return out


def main():
    bench, mine = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    results = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
        here, "..", "..", "..", "shared", "benchmarks", "vnncomp2021", "results")
    tools = published(results, bench)
    with open(mine) as f:
        tools["lipfp"] = {
            (r["onnx"], r["vnnlib"]): (verdict(r["result"]), float(r["seconds"]))
            for r in csv.DictReader(f)
        }
    keys = sorted(tools["lipfp"])
    group = (lambda k: k[0]) if bench == "mnistfc" else (lambda k: "all 45 networks")
    # a verdict contradicts another when one tool says sat and another unsat
    said = defaultdict(set)
    for tool, v in tools.items():
        for k, (w, _) in v.items():
            if w in ("sat", "unsat"):
                said[k].add((tool, w))
    for net in sorted({group(k) for k in keys}):
        mine_keys = [k for k in keys if group(k) == net]
        print(f"\n### {bench}: {net} ({len(mine_keys)} instances)\n")
        print("| tool | verified | falsified | mean s (decided) | contradicted |")
        print("|---|---:|---:|---:|---:|")
        order = ["lipfp"] + sorted(t for t in tools if t != "lipfp")
        for tool in order:
            v = tools[tool]
            got = [v[k] for k in mine_keys if k in v]
            if not got:
                continue
            ver = sum(w == "unsat" for w, _ in got)
            fal = sum(w == "sat" for w, _ in got)
            times = [t for w, t in got if w in ("sat", "unsat") and t == t]
            mean = sum(times) / len(times) if times else float("nan")
            bad = sum(
                1 for k in mine_keys if k in v and v[k][0] in ("sat", "unsat")
                and any(w != v[k][0] for _, w in said[k]))
            name = "**lipfp**" if tool == "lipfp" else tool
            print(f"| {name} | {ver} | {fal} | {mean:.1f} | {bad} |")
    times = sorted(t for w, t in tools["lipfp"].values() if w in ("sat", "unsat"))
    if times:
        at = lambda q: times[min(len(times) - 1, int(q * len(times)))]
        buckets = [1, 10, 60, 120, 300]
        counts = ", ".join(f"<= {b} s: {sum(t <= b for t in times)}" for b in buckets)
        print(f"\nlipfp's decided instances: {len(times)}; seconds: median {at(0.5):.2f}, "
              f"90% {at(0.9):.2f}, max {times[-1]:.2f} ({counts})")
    refuted = [k for k in keys if any(w == "sat" for t, w in said[k] if t != "lipfp")]
    print(f"\ninstances some other tool refuted: {len(refuted)}; lipfp refuted "
          f"{sum(tools['lipfp'][k][0] == 'sat' for k in refuted)} of them")
    print("\nlipfp's verdicts that another tool contradicts:")
    any_ = False
    for k in keys:
        w = tools["lipfp"][k][0]
        if w in ("sat", "unsat"):
            others = sorted(t for t, x in said[k] if x != w)
            if others:
                any_ = True
                print(f"* {k[0]} {k[1]}: lipfp {w}; {', '.join(others)} said otherwise")
    if not any_:
        print("* none")


if __name__ == "__main__":
    main()
