"""What `import v1` costs: wall and CPU time, peak RSS, and which heavy libraries it loads.

    python benchmarks/import_time.py [--repeats 7] [--module v1] [--no-bytecode-cache] [--json out.json]

Each repeat is a fresh interpreter. By default the bytecode cache is on (as for an installed
package), kept in a temporary `-X pycache_prefix` so the source tree stays clean, and warmed
by one run that is not counted; `--no-bytecode-cache` compiles every module from source each
time (what `PYTHONDONTWRITEBYTECODE=1` gives). The interpreter alone (`import sys`) is measured
the same way, so the figures can be read as "on top of Python". For the per-module breakdown:
`python -X importtime -c "import v1" 2>&1 | sort -t'|' -k2 -n | tail -30`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HEAVY = ("openai", "anthropic", "aiohttp", "httpx", "httpx2", "mcp", "rich", "torch", "transformers", "datasets")
PROBE = """
import json, resource, sys, time
wall, cpu = time.perf_counter(), time.process_time()
import {module}
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "rss_mib": rss, "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def one(module: str, env: dict[str, str], prefix: str | None) -> dict[str, object]:
    command = [sys.executable]
    if prefix is not None:
        command += ["-X", f"pycache_prefix={prefix}"]
    command += ["-c", PROBE.format(module=module, heavy=HEAVY)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(module: str, repeats: int, cache: bool) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None) if cache else env.update(PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory() as prefix:
        if cache:
            one(module, env, prefix)  # writes the bytecode cache
        runs = [one(module, env, prefix if cache else None) for _ in range(repeats)]
    return {
        "wall_s": statistics.median(float(r["wall_s"]) for r in runs),  # type: ignore[arg-type]
        "cpu_s": statistics.median(float(r["cpu_s"]) for r in runs),  # type: ignore[arg-type]
        "rss_mib": statistics.median(float(r["rss_mib"]) for r in runs),  # type: ignore[arg-type]
        "heavy": runs[-1]["heavy"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", default="v1")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile from source every time")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    cache = not args.no_bytecode_cache
    python = measure("sys", args.repeats, cache)
    target = measure(args.module, args.repeats, cache)
    print(
        f"import {args.module} (median of {args.repeats}, bytecode cache {'on' if cache else 'off'}, load {os.getloadavg()[0]:.1f})"
    )
    print(f"  wall time   {target['wall_s']:.3f} s")
    print(f"  CPU time    {target['cpu_s']:.3f} s")
    print(f"  peak RSS    {target['rss_mib']:.1f} MiB (the interpreter alone: {python['rss_mib']:.1f} MiB)")
    print(f"  heavy libraries loaded: {', '.join(target['heavy']) or 'none'}")  # type: ignore[arg-type]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"module": args.module, "bytecode_cache": cache, "python": python, "import": target}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
