"""The dev queries whose qids a file lists, in the dev file's order (the held-out split the learning scripts share):

    python scripts/heldout_queries.py <dev.jsonl> <qids.txt> <out.jsonl>
"""

import json
import sys
from pathlib import Path


def main(dev: str, held: str, out: str) -> int:
    keep = set(Path(held).read_text().split())
    lines = [line for line in Path(dev).read_text().splitlines()
             if line.strip() and str(json.loads(line)["qid"]) in keep]
    Path(out).write_text("".join(line + "\n" for line in lines))
    print(f"{len(lines)} held-out queries -> {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
