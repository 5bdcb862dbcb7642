"""The JSON-lines reader (storage/fast_json.py) without Spark: the text it gives each declared
column, the types it says Spark infers, and the files it leaves to Spark (None). Its agreement
with Spark's reader is tested end to end in tests/test_local_stage.py and tests/test_live.py."""
from mpi_join.storage.fast_json import text_columns


def _cols(text, names=("t", "k")):
    got = text_columns(text.encode(), list(names))
    return None if got is None else ({c: got[0].column(c).to_pylist() for c in names}, got[1])


def test_values_as_spark_gives_them_as_text():
    cols, types = _cols('{"t": 1.5e3, "k": "a"}\n\n \t\n{"k": true, "t": -0}\r\n{"t": null}\n')
    assert cols == {"t": ["1.5e3", "-0", None], "k": ["a", "true", None]}
    assert types == {"t": "double", "k": "string"}
    cols, types = _cols('\ufeff{"t": 12, "k": false}\n{"t": 9223372036854775807, "k": null, "x": [1, {"y": 2}]}\n')
    assert cols == {"t": ["12", "9223372036854775807"], "k": ["false", None]}
    assert types == {"t": "bigint", "k": "boolean"}


def test_types_spark_infers_or_none():
    assert _cols('{"t": 1, "k": 2}\n{"t": "x", "k": 2.5}\n')[1] == {"t": "string", "k": "double"}
    assert _cols('{"t": null, "k": true}\n{"t": null, "k": 1}\n')[1] == {"t": "string", "k": "string"}
    assert _cols('{"t": 1}\n')[1] == {"t": "bigint", "k": None}                       # a key no line has
    assert _cols('{"t": 99999999999999999999, "k": 1}\n')[1]["t"] is None            # a decimal


def test_files_left_to_spark():
    for text in ['{"t": 1, "t": 2}\n', '{"t": 1} {"t": 2}\n', '[{"t": 1}]\n', '7\n', "{'t': 1}\n",
                 '{"t": NaN}\n', '{"t": {"a": 1}}\n', '{"k": [1]}\n', '{"T": 1, "t": 2}\n', '{"K": 1, "t": 2}\n',
                 '{"t": 1}\r{"t": 2}\n', '{"t": "\\ud800"}\n', 'not json\n']:
        assert _cols(text) is None, text
    assert text_columns(b'{"t": "\xff"}\n', ["t"]) is None
