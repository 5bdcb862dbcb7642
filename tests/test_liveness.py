"""Liveness bookkeeping (liveness.py) on a fake clock, without MPI."""
from mpi_join.runtime.liveness import Liveness


def test_a_silent_peer_is_reported_with_what_was_last_heard():
    lv = Liveness(10, now=0.0)
    lv.watch(1, 0.0)
    lv.watch(2, 0.0)
    for t in range(1, 12):                       # this rank polls every second
        lv.tick(float(t))
        lv.on_heard(1, "an acknowledgement", float(t))
    assert lv.silent(10.0) is None
    peer, secs, last = lv.silent(11.0)
    assert (peer, secs, last) == (2, 11.0, "nothing yet")
    lv.on_heard(2, "a heartbeat", 11.0)
    assert lv.silent(11.0) is None


def test_heartbeat_targets_until_told_to_stop():
    lv = Liveness(10, now=0.0)
    assert lv.beat_every == 2.0 and Liveness(60, 0.0).beat_every == 5.0
    lv.watch(1, 0.0)
    lv.watch(2, 0.0)
    assert lv.beating == {1, 2}
    lv.stop_beating(1)
    assert lv.beating == {2} and 1 in lv.heard      # still watched until it is unwatched
    lv.unwatch(1)
    assert lv.silent(100.0)[0] == 2


def test_time_this_rank_spent_away_is_not_held_against_its_peers():
    """A 30 s checkpoint write on this rank: peers' messages wait unread; that is no silence."""
    lv = Liveness(10, now=0.0)
    lv.watch(1, 0.0)
    lv.tick(1.0)
    lv.tick(31.0)                                 # back after 30 s away
    assert lv.silent(31.0) is None
    assert lv.silent(42.0)[0] == 1                # but then 11 s of real silence is


def test_unwatched_peers_are_never_reported():
    lv = Liveness(5, now=0.0)
    lv.on_heard(3, "a data batch", 1.0)
    lv.tick(100.0)
    assert lv.silent(100.0) is None
