"""common/readings.py: a timing printed with its promise and the machine, never asserted."""

from __future__ import annotations

import pytest

from common import readings
from common.readings import FIGURE_LINE, MACHINE_PART, Machine, Reading, read_figure


def _reading(value, expect=(">=", 3.0), load=0.4) -> Reading:
    return Reading(key="03_1/cache-vs-guide", value=value, unit="×", what="the cache against the guide",
                   expect=expect, machine=Machine(cores=2, load=load))


def test_a_reading_states_figure_promise_machine_and_verdict():
    text = str(_reading(28.46))
    assert text == ("[figure 03_1/cache-vs-guide] 28.5× — the cache against the guide\n"
                    "  expected ≥ 3.00× on a quiet machine; here 28.5× on 2 cores at load average 0.4: as expected.")
    first, second = text.splitlines()
    match = FIGURE_LINE.match(first)
    assert match and match["key"] == "03_1/cache-vs-guide" and match["value"] == "28.5" and match["unit"] == "×"
    assert MACHINE_PART.search(second)["load"] == "0.4"


def test_a_missed_promise_is_read_not_raised_and_a_busy_machine_is_named():
    assert _reading(2.1).as_expected is False
    assert "short of it on this machine" in str(_reading(2.1))
    assert "busy machine" in str(_reading(2.1, load=5.0))
    assert _reading(2.1, expect=None).as_expected is None
    assert str(_reading(2.1, expect=None)).endswith("Here 2.10× on 2 cores at load average 0.4.")


def test_units_with_a_space_and_large_numbers_parse_back():
    reading = Reading(key="02_1/loader-ms", value=10712.0, unit=" images/s", what="the loader",
                      expect=("<=", 12.0), machine=Machine(cores=1, load=None))
    match = FIGURE_LINE.match(str(reading).splitlines()[0])
    assert match["value"] == "10,712" and match["unit"] == " images/s"
    assert "1 core at load average unknown" in str(reading)
    assert str(_reading(1.0)).startswith("[figure 03_1/cache-vs-guide] 1.00× —")
    assert str(_reading(0.05)).startswith("[figure 03_1/cache-vs-guide] 0.050× —")


def test_read_figure_prints_and_refuses_a_bad_promise_or_key(capsys, monkeypatch):
    monkeypatch.setattr(readings, "machine_state", lambda: Machine(cores=2, load=1.0))
    reading = read_figure("06_3/chain", 11.6, unit="×", what="a fused chain", expect=(">", 1.5))
    assert reading.as_expected and capsys.readouterr().out == str(reading) + "\n"
    quiet = read_figure("04_3/bw", 91.0, unit="%", what="x", machine=Machine(cores=2, load=0.3))
    assert "at load average 0.3" in str(quiet), "the machine as it was before the measurement"
    capsys.readouterr()
    with pytest.raises(ValueError, match="comparison must be one of"):
        read_figure("06_3/chain", 1.0, unit="×", what="x", expect=("=>", 1.5))
    with pytest.raises(ValueError, match="figure key"):
        read_figure("06_3 chain", 1.0, unit="×", what="x")


def test_the_machine_is_this_one():
    machine = readings.machine_state()
    assert machine.cores >= 1 and (machine.load is None or machine.load >= 0)
    assert Machine(cores=2, load=2.5).busy and not Machine(cores=2, load=2.0).busy
