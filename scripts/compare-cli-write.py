#!/usr/bin/env python3
"""One CLI write on a big document, two `elfiee` binaries side by side (wall and peak RSS).

Usage: scripts/compare-cli-write.py OLD_ELFIEE NEW_ELFIEE [--files 10000] [--runs 21]

Writes a source tree of N small files, imports it with NEW (`dir import`: one block per
file), adds one markdown block, then runs
`elfiee markdown write BLOCK --text <2048 bytes>` with OLD and NEW alternately, `--runs`
times each, and prints one JSON object: the median wall (ms) and peak RSS (MiB) of each and
the ratios NEW / OLD. Both binaries must read the same document format (they do within a
format version; docs/EVENTS.md).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(binary, elf, args, env=None):
    t = time.perf_counter()
    proc = subprocess.Popen([binary, "--elf", elf] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - t) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{binary} {args}: exit {proc.returncode}: {err.decode(errors='replace')}")
    return wall, usage.ru_maxrss / 1024, out, err


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    old, new = os.path.abspath(args[0]), os.path.abspath(args[1])
    files = int(args[args.index("--files") + 1]) if "--files" in args else 10000
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 21
    env = dict(os.environ)
    env.pop("RUST_LOG", None)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        src = os.path.join(tmp, "project")
        for i in range(files):
            d = os.path.join(src, "src", f"m{i // 100:03}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i:05}.rs"), "w") as f:
                f.write(f"// file {i}\npub fn f{i}() -> u64 {{ {i} }}\n" * 8)
        elf = os.path.join(tmp, "big.elf")
        subprocess.run([new, "init", elf, "--owner", "Alice"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        subprocess.run([new, "--elf", elf, "--json", "dir", "import", src, "--name", "project"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        created = subprocess.run(
            [new, "--elf", elf, "--json", "block", "create", "--type", "markdown", "--name", "w"],
            check=True, env=env, capture_output=True)
        block = json.loads(created.stdout)["block_id"]
        blocks = json.loads(subprocess.run([new, "--elf", elf, "--json", "block", "list"],
                                           check=True, env=env, capture_output=True).stdout)
        text = "x" * 2048
        result = {"old": {"wall_ms": [], "rss_mib": []}, "new": {"wall_ms": [], "rss_mib": []}}
        for i in range(runs * 2 + 2):
            which = "old" if i % 2 == 0 else "new"
            binary = old if which == "old" else new
            wall, rss, _, err = run(binary, elf, ["markdown", "write", block, "--text",
                                                   f"{text}{i}"], env)
            if err.strip():
                print(f"{which}: {err.decode(errors='replace')}", file=sys.stderr)
            if i >= 2:  # the first pair warms the page cache
                result[which]["wall_ms"].append(wall)
                result[which]["rss_mib"].append(rss)
        out = {"blocks": len(blocks), "runs": runs, "statistic": "median, alternating old/new"}
        for which in ("old", "new"):
            out[which] = {k: round(statistics.median(v), 2) for k, v in result[which].items()}
        out["ratio_wall"] = round(out["new"]["wall_ms"] / out["old"]["wall_ms"], 3)
        out["ratio_rss"] = round(out["new"]["rss_mib"] / out["old"]["rss_mib"], 3)
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
