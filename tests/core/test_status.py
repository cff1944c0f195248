from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateward import IllegalTransitionError, RunStatus, TransitionKind
from stateward.core.status import TERMINAL_STATUSES, TRANSITIONS, next_status


def test_terminal_statuses_have_no_way_out() -> None:
    for status in TERMINAL_STATUSES:
        for kind in TransitionKind:
            with pytest.raises(IllegalTransitionError) as err:
                next_status(status, kind)
            assert err.value.code == "ILLEGAL_TRANSITION"


def test_a_wait_is_left_only_by_an_answer_expiry_or_cancel() -> None:
    moves = {kind for (status, kind) in TRANSITIONS if status is RunStatus.WAITING_FOR_USER}
    assert moves == {TransitionKind.RESUME, TransitionKind.FAIL, TransitionKind.CANCEL}


def test_pause_goes_through_pausing() -> None:
    assert next_status(RunStatus.RUNNING, TransitionKind.PAUSE) is RunStatus.PAUSING
    assert next_status(RunStatus.PAUSING, TransitionKind.PAUSED) is RunStatus.PAUSED
    with pytest.raises(IllegalTransitionError):
        next_status(RunStatus.RUNNING, TransitionKind.PAUSED)


@given(st.lists(st.sampled_from(list(TransitionKind)), max_size=40))
def test_random_sequences_only_make_table_moves(kinds: list[TransitionKind]) -> None:
    status = RunStatus.RUNNING
    for kind in kinds:
        try:
            after = next_status(status, kind)
        except IllegalTransitionError:
            assert (status, kind) not in TRANSITIONS
            continue
        assert TRANSITIONS[(status, kind)] is after
        assert not status.is_terminal
        status = after


# The table written out independently of the code, every (status, kind) pair: what is listed is the
# only legal move from that status; everything else must raise.
R, W, PG, PD = RunStatus.RUNNING, RunStatus.WAITING_FOR_USER, RunStatus.PAUSING, RunStatus.PAUSED
K = TransitionKind
EXPECTED = {
    (R, K.CONTINUE): R,
    (R, K.SUSPEND): W,
    (R, K.COMPLETE): RunStatus.COMPLETED,
    (R, K.PARTIAL): RunStatus.PARTIALLY_COMPLETED,
    (R, K.FAIL): RunStatus.FAILED,
    (R, K.PAUSE): PG,
    (R, K.CANCEL): RunStatus.CANCELLED,
    (PG, K.CONTINUE): PG,
    (PG, K.PAUSED): PD,
    (PG, K.SUSPEND): W,
    (PG, K.COMPLETE): RunStatus.COMPLETED,
    (PG, K.PARTIAL): RunStatus.PARTIALLY_COMPLETED,
    (PG, K.FAIL): RunStatus.FAILED,
    (PG, K.CANCEL): RunStatus.CANCELLED,
    (W, K.RESUME): R,
    (W, K.FAIL): RunStatus.FAILED,
    (W, K.CANCEL): RunStatus.CANCELLED,
    (PD, K.RESUME): R,
    (PD, K.CANCEL): RunStatus.CANCELLED,
}


@pytest.mark.parametrize("status", list(RunStatus))
@pytest.mark.parametrize("kind", list(TransitionKind))
def test_every_pair_moves_as_the_written_table_says(status: RunStatus, kind: TransitionKind) -> None:
    expected = EXPECTED.get((status, kind))
    if expected is None:
        with pytest.raises(IllegalTransitionError):
            next_status(status, kind)
    else:
        assert next_status(status, kind) is expected
