"""GracefulStop: Ctrl-C presses, in this process, wherever Python happens to run the handler."""

from __future__ import annotations

import gc
import signal
import time
import weakref

import pytest

from automl.errors import Aborted
from automl.fleet.study_loop import GracefulStop


class _Held:
    """An object whose collection runs a callback, as SQLAlchemy's pooled connections do."""


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.001)


@pytest.fixture
def stop():
    installed = GracefulStop().install()
    yield installed
    installed.uninstall()


def test_a_first_ctrl_c_requests_a_stop_and_a_second_aborts(stop):
    signal.raise_signal(signal.SIGINT)
    assert stop.requested and not stop.aborted
    with pytest.raises(Aborted):
        signal.raise_signal(signal.SIGINT)
    assert stop.aborted


def test_an_abort_in_a_weakref_callback_is_raised_again_in_the_code_it_interrupted(stop):
    signal.raise_signal(signal.SIGINT)
    held = _Held()
    # Python swallows what a weakref callback raises: the second press must not be lost there.
    ref = weakref.ref(held, lambda _: signal.raise_signal(signal.SIGINT))
    with pytest.raises(Aborted):
        del held
        gc.collect()
        _busy(2.0)
    assert ref() is None and stop.aborted


def test_other_unraisable_errors_still_reach_the_previous_hook(stop, monkeypatch):
    seen = []
    monkeypatch.setattr(stop, "_previous_hook", seen.append)
    held = _Held()
    ref = weakref.ref(held, lambda _: 1 / 0)
    del held
    gc.collect()
    assert ref() is None
    assert [type(u.exc_value) for u in seen] == [ZeroDivisionError]
