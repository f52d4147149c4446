"""The GIL is released while the model runs: a Python thread keeps running during `track`, and
several trackers of one model track at once from several threads with the serial results."""

from __future__ import annotations

import threading
import time

import numpy as np

import edgetam

from conftest import Sequence


def track_all(model: edgetam.Model, sequence: Sequence, frames: int = 8) -> list[edgetam.FrameResult]:
    t = model.tracker()
    t.add_box(1, 0, (35, 57, 93, 108))
    t.add_points(2, 0, [(65, 50, 1), (125, 119, 0)])
    return [t.track(sequence.frames[f]) for f in range(frames)]


def same(a: list[edgetam.FrameResult], b: list[edgetam.FrameResult]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert [o.id for o in ra.objects] == [o.id for o in rb.objects]
        for oa, ob in zip(ra.objects, rb.objects):
            assert np.array_equal(oa.mask, ob.mask) and oa.score == ob.score


def test_gil_released_during_track(model: edgetam.Model, sequence: Sequence) -> None:
    """A counting thread advances while `track` runs. With the GIL held for the whole call the
    counter would stand still (it could only run at the call's edges)."""
    t = model.tracker()
    t.add_box(1, 0, (35, 57, 93, 108))
    t.track(sequence.frames[0])
    count = 0
    stop = threading.Event()

    def counter() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    thread = threading.Thread(target=counter)
    thread.start()
    try:
        time.sleep(0.05)
        during, elapsed = [], 0.0
        for f in range(1, 6):
            before = count
            start = time.perf_counter()
            t.track(sequence.frames[f])
            elapsed += time.perf_counter() - start
            during.append(count - before)
    finally:
        stop.set()
        thread.join()
    print(f"counter advanced {during} during 5 track calls ({elapsed * 1e3:.0f} ms)")
    # Every call let the counter run many times (thousands of increments per millisecond
    # of Python time; a held GIL would allow a handful at the call's edges).
    assert min(during) > 1000, during


def test_two_threads_two_trackers(model: edgetam.Model, sequence: Sequence) -> None:
    serial = track_all(model, sequence)
    results: dict[int, list[edgetam.FrameResult]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = track_all(model, sequence)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    same(results[0], serial)
    same(results[1], serial)


def test_one_tracker_shared_by_threads_takes_turns(model: edgetam.Model, sequence: Sequence) -> None:
    """Calls on one tracker from two threads are serialised (no error, no torn state)."""
    t = model.tracker()
    t.add_box(1, 0, (35, 57, 93, 108))
    indices: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                indices.append(t.track(sequence.frames[0]).frame_index)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and sorted(indices) == list(range(6))


def test_pipeline_capture_and_consumer_threads(model: edgetam.Model, sequence: Sequence) -> None:
    """A capture thread pushes while the main thread iterates over results, in order."""
    n = 10
    with model.pipeline(queue=2, drop="block", encoder_ahead=True) as p:
        p.add_box(1, (35, 57, 93, 108))

        def capture() -> None:
            for f in range(n):
                p.push(sequence.frames[f])
            p.finish()

        th = threading.Thread(target=capture)
        th.start()
        outs = list(p)
        th.join()
    assert [o.id for o in outs] == list(range(n))
    assert all(o.outcome == "tracked" for o in outs)
    serial = model.tracker()
    serial.add_box(1, 0, (35, 57, 93, 108))
    same([o.result for o in outs if o.result is not None], [serial.track(sequence.frames[f]) for f in range(n)])


def test_drop_policies(model: edgetam.Model, sequence: Sequence) -> None:
    """A producer faster than the tracker: "oldest" and "newest" drop frames, never block, and
    still return one result per pushed frame, in order."""
    for policy in ("oldest", "newest"):
        with model.pipeline(queue=1, drop=policy) as p:
            p.add_box(1, (35, 57, 93, 108))
            start = time.perf_counter()
            for f in range(12):
                assert p.push(sequence.frames[f % 20]) == f
            pushing = time.perf_counter() - start
            p.finish()
            outs = list(p)
        assert [o.id for o in outs] == list(range(12))
        dropped = sum(o.dropped for o in outs)
        assert dropped > 0, policy
        assert all(o.outcome in ("tracked", "dropped") for o in outs)
        print(f"{policy}: {dropped} of 12 dropped, pushing took {pushing * 1e3:.1f} ms")
        if policy == "oldest":
            # The newest frame always survives.
            assert outs[-1].outcome == "tracked"


def test_recv_timeout(model: edgetam.Model) -> None:
    with model.pipeline() as p:
        start = time.perf_counter()
        try:
            p.recv(timeout=0.2)
        except TimeoutError:
            pass
        else:  # pragma: no cover
            raise AssertionError("recv returned without a frame")
        assert 0.15 < time.perf_counter() - start < 5
        assert p.try_recv() is None


def test_close_from_another_thread_ends_iteration(model: edgetam.Model) -> None:
    p = model.pipeline()
    threading.Timer(0.3, p.close).start()
    assert list(p) == []
    try:
        p.push(np.zeros((8, 8, 3), np.uint8))
    except edgetam.PipelineError:
        pass
    else:  # pragma: no cover
        raise AssertionError("push on a closed pipeline")
