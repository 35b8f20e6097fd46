"""The package's one JSON Lines reader (``scholar_agents.validation.jsonl_records`` / ``read_jsonl``): records with
their line numbers, blank lines skipped, ``.gz`` read decompressed, one error naming file:line, and the tolerant
mode the resumable readers use. (The command-line validators are tested in tests/test_cli_errors.py.)"""

import gzip
import re

import pytest

from scholar_agents.validation import UsageError, jsonl_records, read_jsonl, reading


def test_records_come_with_their_line_numbers_and_blank_lines_are_skipped(tmp_path):
    f = tmp_path / "good.jsonl"
    f.write_text('{"a": 1}\n\n   \n{"a": 2, "b": "é"}\n{"a": 3}')  # no newline after the last line
    assert list(jsonl_records(f)) == [(1, {"a": 1}), (4, {"a": 2, "b": "é"}), (5, {"a": 3})]
    assert read_jsonl(str(f)) == [{"a": 1}, {"a": 2, "b": "é"}, {"a": 3}]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert read_jsonl(empty) == []


def test_a_line_separator_inside_a_string_is_not_a_line_break(tmp_path):
    """``json.dumps(ensure_ascii=False)`` writes U+2028 raw; ``str.splitlines`` would cut the record there."""
    f = tmp_path / "sep.jsonl"
    f.write_text('{"t": "a\u2028b"}\n{"t": "c"}\n', encoding="utf-8")
    assert list(jsonl_records(f)) == [(1, {"t": "a\u2028b"}), (2, {"t": "c"})]


@pytest.mark.parametrize("line,reason", [
    ('{"a": 2, broken', "invalid JSON at column 10: Expecting property name enclosed in double quotes"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('"text"', "expected a JSON object, got str"),
])
def test_a_malformed_line_is_one_error_naming_file_and_line(tmp_path, line, reason):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"a": 1}\n\n' + line + '\n{"a": 4}\n')
    got = []
    with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}:3: {reason}$"):
        for rec in jsonl_records(f):
            got.append(rec)
    assert got == [(1, {"a": 1})]  # the records before it were read
    with pytest.raises(ValueError, match=rf"^bad.jsonl:3: {reason}$"):  # `name`: how the message names the file
        read_jsonl(f, name="bad.jsonl")
    # a command turns it into one UsageError naming its setting
    where = re.escape(str(f))
    with pytest.raises(UsageError, match=rf"^data.path='{where}' cannot be read: {where}:3: {reason}$"):
        with reading("data.path", f):
            read_jsonl(f)


def test_gz_files_are_read_decompressed(tmp_path):
    f = tmp_path / "records.jsonl.gz"
    with gzip.open(f, "wt", encoding="utf-8") as out:
        out.write('{"id": "x"}\n\n{"id": "y"}\nnot json\n')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}:4: invalid JSON"):
        read_jsonl(f)
    assert read_jsonl(f, on_bad=lambda line_no, reason: None) == [{"id": "x"}, {"id": "y"}]


def test_tolerant_mode_hands_each_bad_line_to_the_caller_and_goes_on(tmp_path):
    f = tmp_path / "run.jsonl"
    f.write_text('{"q": 1}\n[3]\n{"q": 2}\n{"q": 3, "cut-o')  # a bad line mid-file, then one cut by a killed job
    bad = []
    records = list(jsonl_records(f, on_bad=lambda line_no, reason: bad.append((line_no, reason))))
    assert records == [(1, {"q": 1}), (3, {"q": 2})]
    assert bad == [(2, "expected a JSON object, got list"),
                   (4, "invalid JSON at column 10: Unterminated string starting at")]

    def refuse(line_no, reason):  # the callback may stop the read itself (what skip_bad=False does in the loaders)
        raise ValueError(f"refused line {line_no}: {reason}")

    with pytest.raises(ValueError, match="refused line 2: expected a JSON object"):
        read_jsonl(f, on_bad=refuse)


def test_a_missing_file_is_the_usual_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_jsonl(tmp_path / "nope.jsonl")
