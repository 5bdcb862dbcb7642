"""The live progress line: a resumed run counts tuples from seq 0 against the whole input, and
its rate from what this run released."""
import io
import time

from mpi_join.master.progress import Progress


def test_a_resumed_run_shows_the_whole_input_and_its_own_rate():
    out = io.StringIO()
    p = Progress(16_000, stream=out)
    p.restart(15_000)
    time.sleep(0.05)
    p.update(16_000, 21_786, force=True)
    line = out.getvalue()
    assert "16,000/16,000 tuples (100.0%)" in line and "21,786 results" in line, line
    rate_k = float(line.split("k tuples/s")[0].split()[-1])
    assert rate_k < 1000 / 0.05 / 1e3 * 1.01, line         # 1,000 tuples in >= 0.05 s, not 16,000
