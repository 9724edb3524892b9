"""`python -m suite.worker.plugins --out FILE REF...`: import each workload plugin in this
throwaway process and say how it went, before the parent imports any of them.

A plugin is code from the user, often from a pull request. Importing it here first means one
that exits (sys.exit, os._exit), never finishes, or prints without end does so where it harms
nothing: the parent (suite/execute/plugins.py) bounds this process in time and output and turns
what it sees into an error naming the plugin, never a decision without the cells it names.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path


def check(ref: str) -> dict[str, object]:
    """How resolving one reference went: ok, a WorkloadError (the parent's own resolve() says
    the same in its words), or anything else that escaped it."""
    from suite.core.errors import WorkloadError
    from suite.workloads import resolve

    try:
        resolved = resolve(ref)
    except WorkloadError as exc:
        return {"ok": False, "kind": "workload", "error": str(exc)[:1000]}
    except BaseException as exc:  # KeyboardInterrupt included: this process only reports
        tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return {"ok": False, "kind": "escaped", "error": tail[:1000]}
    return {"ok": True, "name": resolved.workload.name, "file": resolved.file}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.worker.plugins")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("refs", nargs="+")
    args = parser.parse_args(argv)
    results = {}
    for ref in args.refs:
        results[ref] = check(ref)
        sys.stdout.flush()
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(results), encoding="utf-8")
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
