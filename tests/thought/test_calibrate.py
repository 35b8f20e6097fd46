"""`scholar thought calibrate`: cosine quantiles of the configured embedder on a corpus and where the paper's
thresholds (ε 0.85, SciPIP's τ 0.8) fall among them — the statistics on hand-made vectors, and the command on a slice
of the bundled sample with the embedded MiniLM."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from scholar_agents.thought.calibrate import similarity_stats
from scholar_agents.validation import UsageError
from tests.fixtures.llm import TINY_TOKENIZER_DIR


def test_similarity_stats_on_hand_made_vectors():
    # cosines: a.b = 0.8, a.c = 0, b.c = 0.6 (unit vectors; d is c scaled: the norm must not matter)
    a, b, c = np.array([1.0, 0.0]), np.array([0.8, 0.6]), np.array([0.0, 1.0])
    s = similarity_stats(np.stack([a, b, 3 * c]), n_pairs=3000, quantiles=[0.0, 0.5, 1.0],
                         thresholds={"eps": 0.7, "tau": 0.9}, seed=0)
    # nearest other: a -> b (0.8), b -> a (0.8), c -> b (0.6)
    assert s["nearest"]["quantiles"] == pytest.approx({"0%": 0.6, "50%": 0.8, "100%": 0.8})
    assert s["nearest"]["mean"] == pytest.approx(2.2 / 3)
    assert s["nearest"]["thresholds"]["eps"]["percentile"] == pytest.approx(100 / 3)  # only c's 0.6 is below 0.7
    assert s["nearest"]["thresholds"]["eps"]["share_at_or_above"] == pytest.approx(2 / 3)
    assert s["nearest"]["thresholds"]["tau"]["share_at_or_above"] == 0.0
    # random pairs are of different chunks, uniform over the three unordered pairs: values are 0.8, 0, 0.6
    p = s["pairwise"]
    assert set(np.round(list(p["quantiles"].values()), 6)) <= {0.0, 0.6, 0.8}
    assert p["mean"] == pytest.approx((0.8 + 0.0 + 0.6) / 3, abs=0.03)
    assert p["thresholds"]["eps"]["share_at_or_above"] == pytest.approx(1 / 3, abs=0.03)
    with pytest.raises(UsageError, match="at least 2 chunks"):
        similarity_stats(a[None, :], 10, [0.5], {}, 0)


def test_calibrate_command_on_the_bundled_sample_with_minilm(tmp_path):
    from scholar_agents.hydra_app import compose
    from scholar_agents.thought.calibrate import calibrate

    sample = compose("thought_calibrate", []).knowledge[0]
    with gzip.open(sample, "rt", encoding="utf-8") as f:  # a slice of the bundled sample keeps the test fast
        lines = [next(f) for _ in range(60)]
    (tmp_path / "slice.jsonl").write_text("".join(lines))
    overrides = [f"llm.model={TINY_TOKENIZER_DIR}", f"knowledge=[{tmp_path}/slice.jsonl]", "max_chunks=40", "thought.chunk_size=64",
                 "pairs=5000", f"paths.output_dir={tmp_path}/out"]
    report = calibrate(compose("thought_calibrate", overrides))
    assert report["embedder"] == "embedded:minilm" and report["documents"] == 60 and report["chunks"] == 40
    assert report["pairwise"]["n"] == 5000 and report["nearest"]["n"] == 40
    for kind in ("pairwise", "nearest"):
        q = list(report[kind]["quantiles"].values())
        assert list(report[kind]["quantiles"]) == ["50%", "90%", "95%", "99%", "99.9%"]
        assert q == sorted(q) and -1.0 <= q[0] and q[-1] <= 1.0
        assert set(report[kind]["thresholds"]) == {"epsilon", "scipip_tau"}
        assert report[kind]["thresholds"]["epsilon"]["value"] == 0.85  # ε follows thought.epsilon
    # a chunk's nearest other chunk is at least as close as a random other chunk
    assert report["nearest"]["quantiles"]["50%"] > report["pairwise"]["quantiles"]["50%"]
    assert json.loads((tmp_path / "out" / "calibration.json").read_text())["chunks"] == 40
    assert "| epsilon | 0.85 |" in (tmp_path / "out" / "calibration.md").read_text()
    # the same seed gives the same figures
    assert calibrate(compose("thought_calibrate", overrides))["pairwise"] == report["pairwise"]
    with pytest.raises(UsageError, match="knowledge=.*no such file"):
        calibrate(compose("thought_calibrate", overrides + [f"knowledge=[{tmp_path}/missing.jsonl]"]))
    with pytest.raises(UsageError, match="quantiles"):
        calibrate(compose("thought_calibrate", overrides + ["quantiles=[50]"]))


def test_calibrate_bad_input_is_one_line_and_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "scholar_agents", "thought", "calibrate",
                          f"knowledge=[{tmp_path}/missing.jsonl]", f"hydra.run.dir={tmp_path}/run"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert lines == [f"scholar thought calibrate: error: knowledge='{tmp_path}/missing.jsonl': no such file"]
