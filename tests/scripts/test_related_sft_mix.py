"""scripts/related_sft_mix.py: every positive related session kept, negatives sampled per positive, search sessions
replayed, a file without positives refused in one line."""

import json
import subprocess
import sys

from tests.paths import REPO


def _row(kind, related=False, gold=()):
    meta = {"kind": kind, "gold_sections": list(gold), "random_sections": []}
    if related:
        meta["related"] = True
    return {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}], "meta": meta}


def _run(tmp_path, rows, *args):
    src, out = tmp_path / "train.jsonl", tmp_path / "mix.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "related_sft_mix.py"), str(src), str(out), *args],
                       capture_output=True, text=True, cwd=REPO)
    return p, out


def test_positives_kept_negatives_sampled_searches_replayed(tmp_path):
    rows = ([_row("expand", True, ["Title"]) for _ in range(3)] + [_row("expand", True) for _ in range(20)]
            + [_row("search") for _ in range(10)] + [_row("expand")])  # the last: a sectioned expand session
    p, out = _run(tmp_path, rows, "--negatives-per-positive", "2", "--search-sessions", "4")
    assert p.returncode == 0, p.stderr
    counts = json.loads(p.stdout.strip().splitlines()[-1])
    assert counts == {"related_positive": 3, "related_negative_available": 20, "related_negative_kept": 6,
                      "search_available": 10, "search_kept": 4, "rows": 13}
    mix = [json.loads(x) for x in out.read_text().splitlines()]
    assert sum(bool(r["meta"].get("related") and r["meta"]["gold_sections"]) for r in mix) == 3
    assert sum(r["meta"]["kind"] == "search" for r in mix) == 4


def test_no_positive_is_refused(tmp_path):
    p, out = _run(tmp_path, [_row("expand", True), _row("search")])
    assert p.returncode == 2 and "no related session follows a search that adds gold" in p.stderr
    assert not out.exists()
