#!/usr/bin/env python3
"""Stages test binaries for the GPU machine: reads cargo's JSON messages on stdin (from
`cargo test --no-run --message-format=json ...`) and copies each test executable they name
into DEST, as PREFIX + its target name (cargo names the files with a hash). Prints
"<name> <staged path>" per binary.

    cargo test --release -p CRATE --test NAME --no-run --message-format=json |
        python3 scripts/device/stage-tests.py DEST [--prefix P] [--only A,B]

--only keeps only the named test targets (cargo builds test targets of the `-p` packages
alone, so no other package's tests are among them).
"""
import argparse
import json
import os
import shutil
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--only")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    staged = 0
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue  # cargo's human-readable lines, if any
        target = message.get("target", {})
        if (
            message.get("reason") != "compiler-artifact"
            or not message.get("executable")
            or target.get("kind") != ["test"]
        ):
            continue
        if only is not None and target["name"] not in only:
            continue
        path = os.path.join(args.dest, args.prefix + target["name"])
        shutil.copy(message["executable"], path)
        print(target["name"], path)
        staged += 1
    if staged == 0:
        print("stage-tests.py: cargo reported no test binary to stage", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
